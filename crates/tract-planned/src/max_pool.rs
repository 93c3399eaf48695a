//! tract's 2 × 2 max pool of stride 2, a plane at a time on every core.
//! tract has a vectorised path for stride 1 only: each of a stride-2
//! pool's outputs is a loop over its four taps with a bounds check on
//! each, and IS-Net's 33 pools took 52 ms of a 1.9 s run (BENCHMARKS.md,
//! "Max pools"). `PlannedMaxPool` takes the same maximum of the same
//! taps in the same order, so its values are tract's to the bit.

use super::plane_by_plane::plane_by_plane;
use super::put_in_place;
use tract_core::internal::*;
use tract_core::ops::cnn::OptMaxPool;
use tract_core::ops::nn::DataFormat;

/// Puts a `PlannedMaxPool` in place of every 2 × 2, stride-2 max pool of
/// an f32 NCHW tensor whose shape is known and that pads nothing before
/// the planes; returns how many.
pub(super) fn plan_max_pools(model: &mut TypedModel) -> TractResult<usize> {
    put_in_place(model, planned_max_pool)
}

fn planned_max_pool(model: &TypedModel, node: &TypedNode) -> TractResult<Option<PlannedMaxPool>> {
    let Some(pool) = node.op_as::<OptMaxPool>() else {
        return Ok(None);
    };
    let spec = &pool.pool_spec;
    let input = model.outlet_fact(node.inputs[0])?;
    let output = model.outlet_fact(OutletId::new(node.id, 0))?;
    let (Some(from), Some(to)) = (input.shape.as_concrete(), output.shape.as_concrete()) else {
        return Ok(None);
    };
    if node.outputs.len() != 1
        || pool.with_index_outputs.is_some()
        || input.datum_type != f32::datum_type()
        || spec.data_format != DataFormat::NCHW
        || spec.kernel_shape[..] != [2, 2]
        || spec.strides()[..] != [2, 2]
        || spec.dilations()[..] != [1, 1]
        || from.len() != 4
        || to.len() != 4
        || from[..2] != to[..2]
    {
        return Ok(None);
    }
    let padding = spec.computed_padding(&from[2..]);
    // Every output's first tap inside the plane: its window starts there.
    let fits = |axis: usize| {
        padding[axis].pad_before == 0 && to[2 + axis] > 0 && 2 * (to[2 + axis] - 1) < from[2 + axis]
    };
    if !(fits(0) && fits(1)) {
        return Ok(None);
    }
    Ok(Some(PlannedMaxPool {
        input: [from[0], from[1], from[2], from[3]],
        output: [to[2], to[3]],
    }))
}

/// Each output the maximum of the 2 × 2 window at twice its place, of the
/// taps that lie inside the plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMaxPool {
    input: [usize; 4],
    output: [usize; 2],
}

impl Op for PlannedMaxPool {
    fn name(&self) -> StaticName {
        "PlannedMaxPool".into()
    }

    op_as_typed_op!();
}

impl EvalOp for PlannedMaxPool {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let [batch, channels, _, width] = self.input;
        let [out_height, out_width] = self.output;
        let output = plane_by_plane(
            &inputs,
            &[self.input],
            [batch, channels, out_height, out_width],
            || (),
            |_, _, plane, out| {
                // Windows with both columns inside the plane; a last one
                // (an odd width) has only its left column inside.
                let whole = width / 2;
                for (y, out_row) in out.chunks_exact_mut(out_width).enumerate() {
                    let (pairs, last) = out_row.split_at_mut(whole.min(out_width));
                    let top = &plane[2 * y * width..][..width];
                    // tract's order: from f32::MIN, the top row's taps, then
                    // the bottom's, where a bottom row is inside the plane.
                    match plane.get((2 * y + 1) * width..(2 * y + 2) * width) {
                        Some(bottom) => {
                            let windows = top.chunks_exact(2).zip(bottom.chunks_exact(2));
                            for (out, (top, bottom)) in pairs.iter_mut().zip(windows) {
                                out.write(
                                    f32::MIN
                                        .max(top[0])
                                        .max(top[1])
                                        .max(bottom[0])
                                        .max(bottom[1]),
                                );
                            }
                            for out in last {
                                out.write(f32::MIN.max(top[width - 1]).max(bottom[width - 1]));
                            }
                        }
                        None => {
                            for (out, top) in pairs.iter_mut().zip(top.chunks_exact(2)) {
                                out.write(f32::MIN.max(top[0]).max(top[1]));
                            }
                            for out in last {
                                out.write(f32::MIN.max(top[width - 1]));
                            }
                        }
                    }
                }
            },
        )?;
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for PlannedMaxPool {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let [batch, channels, ..] = self.input;
        let [height, width] = self.output;
        Ok(tvec!(inputs[0]
            .datum_type
            .fact([batch, channels, height, width])))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{assert_same_bits, tract_and_planned};
    use tract_core::ops::cnn::{MaxPool, PaddingSpec, PoolSpec};

    /// tract's max pool and the planned one on the same input.
    fn both(
        shape: [usize; 4],
        kernel: usize,
        stride: usize,
        padding: PaddingSpec,
    ) -> (Tensor, Tensor, usize) {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(shape)).unwrap();
        let pool = MaxPool {
            pool_spec: PoolSpec {
                data_format: DataFormat::NCHW,
                kernel_shape: tvec![kernel; 2],
                padding,
                dilations: None,
                strides: Some(tvec![stride; 2]),
                input_channels: shape[1],
                output_channels: shape[1],
            },
            with_index_outputs: None,
        };
        let out = model.wire_node("pool", pool, &[x]).unwrap();
        model.select_output_outlets(&out).unwrap();
        let optimised = model.into_optimized().unwrap();
        tract_and_planned(optimised, shape, plan_max_pools)
    }

    #[test]
    fn a_planned_max_pool_gives_tracts_values_to_the_bit() {
        // U2Net pools with ceil_mode: an odd plane's last window is cut.
        let ceil = || PaddingSpec::ExplicitOnnxPool(tvec![0, 0], tvec![0, 0], true);
        for (shape, padding) in [
            ([1, 3, 8, 10], PaddingSpec::Valid),
            ([2, 2, 6, 4], PaddingSpec::Valid),
            ([1, 2, 7, 9], PaddingSpec::Valid),
            ([1, 2, 7, 9], ceil()),
            ([1, 1, 1, 5], ceil()),
            ([1, 4, 5, 2], ceil()),
        ] {
            let label = format!("{shape:?} {padding:?}");
            let (tract, planned, replaced) = both(shape, 2, 2, padding);
            assert_eq!(replaced, 1, "{label}");
            assert_same_bits(&tract, &planned, &label);
        }
    }

    #[test]
    fn other_pools_are_left_to_tract() {
        for (kernel, stride, padding) in [
            (3, 2, PaddingSpec::Valid),
            (2, 1, PaddingSpec::Valid),
            (2, 2, PaddingSpec::Explicit(tvec![1, 1], tvec![0, 0])),
        ] {
            let (tract, planned, replaced) = both([1, 2, 6, 6], kernel, stride, padding);
            assert_eq!((replaced, &tract), (0, &planned));
        }
    }
}
