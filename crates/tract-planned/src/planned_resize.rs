//! tract's Resize, run a whole plane at a time. tract resamples one axis
//! after the other into fresh zeroed buffers, along the last axis one output
//! value at a time, on one core: on U2NetP and MODNet that was a fifth of a
//! tract run, on IS-Net an eighth (BENCHMARKS.md, "tract"). `PlannedResize` keeps
//! tract's own plan, the same taps and weights summed in the same order, so
//! its values are tract's to the bit, and runs it on tract's threads.

use super::plane_by_plane::plane_by_plane;
use super::put_in_place;
use std::mem::MaybeUninit;
use tract_core::internal::*;
use tract_core::ops::nn::resize::Resize;

/// Puts a `PlannedResize` in place of every Resize of an f32 NCHW tensor
/// over its height and width whose shapes are known; returns how many.
pub(super) fn plan_resizes(model: &mut TypedModel) -> TractResult<usize> {
    put_in_place(model, planned_resize)
}

fn planned_resize(model: &TypedModel, node: &TypedNode) -> TractResult<Option<PlannedResize>> {
    let Some(resize) = node.op_as::<Resize>() else {
        return Ok(None);
    };
    let input = model.outlet_fact(node.inputs[0])?;
    let output = model.outlet_fact(OutletId::new(node.id, 0))?;
    let (Some(from), Some(to)) = (input.shape.as_concrete(), output.shape.as_concrete()) else {
        return Ok(None);
    };
    if input.datum_type != f32::datum_type() || from.len() != 4 || from[..2] != to[..2] {
        return Ok(None);
    }
    // The scales tract's eval would use: the scales input where it gives
    // one per axis, otherwise the ratio of the sizes.
    let given = match resize.optional_scales_input {
        Some(ix) => match model.outlet_fact(node.inputs[ix])?.konst.as_ref() {
            Some(scales) => Some(scales.cast_to::<f32>()?.into_owned()),
            None => return Ok(None),
        },
        None => None,
    };
    let scale = |axis: usize| -> TractResult<f32> {
        Ok(match given.as_ref().filter(|s| s.len() == 4) {
            Some(scales) => scales.try_as_plain_ram()?.as_slice::<f32>()?[axis],
            None => to[axis] as f32 / from[axis] as f32,
        })
    };
    if (0..2).any(|axis| scale(axis).is_ok_and(|s| s != 1.0)) {
        return Ok(None);
    }
    let mut taps = [None, None];
    for (axis, taps) in (2..4).zip(&mut taps) {
        let scale = scale(axis)?;
        if from[axis] == to[axis] && scale == 1.0 {
            continue;
        }
        let plan = resize.plan_axis(scale, from[axis], to[axis]);
        if plan.extrapolated.contains(&true) {
            return Ok(None);
        }
        *taps = Some(Taps::new(plan.window, &plan.indices, &plan.weights));
    }
    let [rows, columns] = taps;
    Ok(Some(PlannedResize {
        input: [from[0], from[1], from[2], from[3]],
        output: [to[2], to[3]],
        rows,
        columns,
    }))
}

/// Where each output line along one axis reads, and with what weights:
/// line `i`'s taps are `taps[starts[i]..starts[i + 1]]`, in tract's order,
/// those of weight 0 left out as tract leaves them (0 × ∞ would be NaN).
#[derive(Debug, Clone, PartialEq)]
struct Taps {
    starts: Vec<usize>,
    taps: Vec<(usize, f32)>,
    /// Whether every line reads two (a linear resize that reads between
    /// lines throughout, as up-sampling does).
    two_each: bool,
    /// Where the lines double, line `2i` reading `i - 1` and `i` and line
    /// `2i + 1` reading `i` and `i + 1` with the same four weights all
    /// along but for two lines at each end (a linear resize to twice the
    /// size): those weights.
    doubling: Option<[f32; 4]>,
}

impl Taps {
    fn new(window: usize, indices: &[usize], weights: &[f32]) -> Taps {
        let mut starts = vec![0];
        let mut taps = Vec::with_capacity(indices.len());
        for (indices, weights) in indices.chunks(window).zip(weights.chunks(window)) {
            let read = indices
                .iter()
                .zip(weights)
                .filter(|&(_, &weight)| weight != 0.0);
            taps.extend(read.map(|(&index, &weight)| (index, weight)));
            starts.push(taps.len());
        }
        let two_each = starts
            .iter()
            .enumerate()
            .all(|(line, &start)| start == 2 * line);
        let mut taps = Taps {
            starts,
            taps,
            two_each,
            doubling: None,
        };
        taps.doubling = taps.doubling_weights();
        taps
    }

    fn doubling_weights(&self) -> Option<[f32; 4]> {
        let pairs = self.pairs()?;
        // Lines 2i and 2i + 1 for i from 1 to `inner`.
        let inner = (pairs.len() % 2 == 0)
            .then_some(pairs.len() / 2)?
            .checked_sub(2)?;
        let [(_, a), (_, b)] = *pairs.get(2)?;
        let [(_, c), (_, d)] = *pairs.get(3)?;
        let doubles = (1..=inner).all(|i| {
            pairs[2 * i] == [(i - 1, a), (i, b)] && pairs[2 * i + 1] == [(i, c), (i + 1, d)]
        });
        (inner > 0 && doubles).then_some([a, b, c, d])
    }

    fn of(&self, line: usize) -> &[(usize, f32)] {
        &self.taps[self.starts[line]..self.starts[line + 1]]
    }

    /// Each line's two taps, where every line reads two.
    fn pairs(&self) -> Option<&[[(usize, f32); 2]]> {
        self.two_each.then(|| self.taps.as_chunks::<2>().0)
    }
}

/// A Resize of an NCHW f32 tensor along H (`rows`) and W (`columns`); an
/// axis without taps is copied.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedResize {
    input: [usize; 4],
    /// Height and width out.
    output: [usize; 2],
    rows: Option<Taps>,
    columns: Option<Taps>,
}

impl PlannedResize {
    /// One channel: each output row is first summed from the input rows it
    /// reads (whole rows, which vectorise), then resampled along its width.
    /// Sums start from 0 and add each tap in turn, as tract's do: the two-tap
    /// loops are the general ones unrolled, to the bit.
    fn resample_plane(&self, plane: &[f32], out: &mut [MaybeUninit<f32>], row: &mut [f32]) {
        let width = self.input[3];
        let line = |source: usize| &plane[source * width..][..width];
        for (y, out_row) in out.chunks_exact_mut(self.output[1]).enumerate() {
            let row: &[f32] = match &self.rows {
                Some(taps) => match taps.of(y) {
                    &[(a, wa), (b, wb)] => {
                        for ((sum, a), b) in row.iter_mut().zip(line(a)).zip(line(b)) {
                            *sum = 0.0 + wa * a + wb * b;
                        }
                        row
                    }
                    taps => {
                        row.fill(0.0);
                        for &(source, weight) in taps {
                            for (sum, value) in row.iter_mut().zip(line(source)) {
                                *sum += weight * value;
                            }
                        }
                        row
                    }
                },
                None => line(y),
            };
            match &self.columns {
                Some(taps) => match taps.pairs() {
                    Some(pairs) => {
                        let lines = out_row.len();
                        let ends = match taps.doubling {
                            // Each three neighbours make two lines: no
                            // taps read, and the loop vectorises.
                            Some([a, b, c, d]) => {
                                let middle = out_row[2..lines - 2].chunks_exact_mut(2);
                                for (out, three) in middle.zip(row.windows(3)) {
                                    out[0].write(0.0 + a * three[0] + b * three[1]);
                                    out[1].write(0.0 + c * three[1] + d * three[2]);
                                }
                                [0..2, lines - 2..lines]
                            }
                            None => [0..lines, lines..lines],
                        };
                        for x in ends.into_iter().flatten() {
                            let [(a, wa), (b, wb)] = pairs[x];
                            out_row[x].write(0.0 + wa * row[a] + wb * row[b]);
                        }
                    }
                    None => {
                        for (x, out) in out_row.iter_mut().enumerate() {
                            let taps = taps.of(x).iter();
                            out.write(
                                taps.fold(0.0, |sum, &(source, weight)| sum + weight * row[source]),
                            );
                        }
                    }
                },
                None => {
                    for (out, &value) in out_row.iter_mut().zip(row) {
                        out.write(value);
                    }
                }
            }
        }
    }
}

// Weights are never NaN, so equality is reflexive, as `Op` needs.
impl Eq for PlannedResize {}

impl Op for PlannedResize {
    fn name(&self) -> StaticName {
        "PlannedResize".into()
    }

    op_as_typed_op!();
}

impl EvalOp for PlannedResize {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let [batch, channels, _, width] = self.input;
        let [height, out_width] = self.output;
        let output = plane_by_plane(
            &inputs[..1],
            &[self.input],
            [batch, channels, height, out_width],
            || vec![0f32; width],
            |row, _, plane, out| self.resample_plane(plane, out, row),
        )?;
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for PlannedResize {
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
    use tract_core::ops::nn::resize::{CoordTransformer, Interpolator, Nearest};

    /// tract's own Resize and the planned one on the same input, in a
    /// model each, so the plan is made as the engine makes it.
    fn both(
        interpolator: Interpolator,
        coord_transformer: CoordTransformer,
        from: [usize; 4],
        to: [usize; 4],
    ) -> (Tensor, Tensor, usize) {
        let mut model = TypedModel::default();
        let source = model.add_source("x", f32::fact(from)).unwrap();
        let sizes = model
            .add_const("sizes", tensor1(&to.map(|d| d as i64)))
            .unwrap();
        let resize = Resize {
            coord_transformer,
            interpolator,
            nearest: Nearest::Floor,
            optional_scales_input: None,
            optional_sizes_input: Some(1),
        };
        let out = model.wire_node("resize", resize, &[source, sizes]).unwrap();
        model.select_output_outlets(&out).unwrap();
        tract_and_planned(model, from, plan_resizes)
    }

    #[test]
    fn a_planned_resize_gives_tracts_values_to_the_bit() {
        use CoordTransformer::*;
        let cases = [
            (
                Interpolator::Linear,
                HalfPixel,
                [1, 3, 8, 8],
                [1, 3, 16, 16],
            ),
            (
                Interpolator::Linear,
                PytorchHalfPixel,
                [1, 2, 5, 7],
                [1, 2, 11, 3],
            ),
            (
                Interpolator::Linear,
                AlignCorners,
                [2, 2, 6, 9],
                [2, 2, 6, 20],
            ),
            (Interpolator::Linear, HalfPixel, [1, 4, 9, 5], [1, 4, 4, 5]),
            (
                Interpolator::Linear,
                HalfPixel,
                [1, 2, 5, 9],
                [1, 2, 10, 18],
            ),
            (
                Interpolator::Cubic,
                Asymmetric,
                [1, 1, 6, 6],
                [1, 1, 13, 10],
            ),
            (Interpolator::Nearest, HalfPixel, [1, 2, 3, 5], [1, 2, 7, 9]),
        ];
        for (interpolator, coords, from, to) in cases {
            let label = format!("{interpolator:?} {coords:?} {from:?} -> {to:?}");
            let (tract, planned, replaced) = both(interpolator, coords, from, to);
            assert_eq!(replaced, 1, "{label}");
            assert_same_bits(&tract, &planned, &label);
        }
    }

    #[test]
    fn a_linear_resize_to_twice_the_width_is_read_as_a_doubling() {
        let doubling = |from: usize, to: usize| {
            let resize = Resize {
                coord_transformer: CoordTransformer::HalfPixel,
                interpolator: Interpolator::Linear,
                nearest: Nearest::Floor,
                optional_scales_input: None,
                optional_sizes_input: None,
            };
            let plan = resize.plan_axis(to as f32 / from as f32, from, to);
            Taps::new(plan.window, &plan.indices, &plan.weights).doubling
        };
        assert_eq!(doubling(8, 16), Some([0.25, 0.75, 0.75, 0.25]));
        assert_eq!(doubling(3, 6), Some([0.25, 0.75, 0.75, 0.25]));
        assert_eq!(doubling(2, 4), None, "no line between the ends");
        assert_eq!(doubling(8, 15), None);
        assert_eq!(doubling(8, 24), None);
    }

    #[test]
    fn a_resize_of_the_batch_or_channels_is_left_to_tract() {
        let (_, _, replaced) = both(
            Interpolator::Linear,
            CoordTransformer::HalfPixel,
            [1, 2, 4, 4],
            [1, 4, 4, 4],
        );
        assert_eq!(replaced, 0);
    }
}
