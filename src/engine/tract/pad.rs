//! tract's zero Pad of a convolution's input, run a channel at a time on
//! every core. tract gives each 3x3 convolution it runs as im2col and a
//! matrix product a Pad of its own, and runs it on one core, filling the
//! output with zeros and copying the input into it through ndarray: on
//! IS-Net 114 of them took 0.64 s of a 4.7 s run (BENCHMARKS.md, "tract").

use super::{plane_by_plane, put_in_place};
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::array::{Pad, PadMode};

/// Puts a `PlannedPad` in place of every Pad with zeros of an f32 NCHW
/// tensor over its height and width whose shape is known; returns how many.
pub(super) fn plan_pads(model: &mut TypedModel) -> TractResult<usize> {
    put_in_place(model, planned_pad)
}

fn planned_pad(model: &TypedModel, node: &TypedNode) -> TractResult<Option<PlannedPad>> {
    let Some(pad) = node.op_as::<Pad>() else {
        return Ok(None);
    };
    let PadMode::Constant(value) = &pad.mode else {
        return Ok(None);
    };
    let input = model.outlet_fact(node.inputs[0])?;
    let Some(shape) = input.shape.as_concrete() else {
        return Ok(None);
    };
    if input.datum_type != f32::datum_type()
        || value.cast_to_scalar::<f32>()? != 0.0
        || shape.len() != 4
        || pad.pads[..2] != [(0, 0), (0, 0)]
    {
        return Ok(None);
    }
    Ok(Some(PlannedPad {
        input: [shape[0], shape[1], shape[2], shape[3]],
        rows: pad.pads[2],
        columns: pad.pads[3],
    }))
}

/// Zeros around each plane of an NCHW f32 tensor: `rows` above and below,
/// `columns` left and right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPad {
    input: [usize; 4],
    rows: (usize, usize),
    columns: (usize, usize),
}

impl PlannedPad {
    fn output(&self) -> [usize; 4] {
        let [batch, channels, height, width] = self.input;
        [
            batch,
            channels,
            height + self.rows.0 + self.rows.1,
            width + self.columns.0 + self.columns.1,
        ]
    }
}

impl Op for PlannedPad {
    fn name(&self) -> StaticName {
        "PlannedPad".into()
    }

    op_as_typed_op!();
}

impl EvalOp for PlannedPad {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let [_, _, _, width] = self.input;
        let output = self.output();
        let out_width = output[3];
        let output = plane_by_plane(
            &inputs[0],
            self.input,
            output,
            || (),
            |_, plane, out| {
                let inside = out[self.rows.0 * out_width..]
                    .chunks_exact_mut(out_width)
                    .zip(plane.chunks_exact(width));
                for (out_row, row) in inside {
                    out_row[self.columns.0..][..width].copy_from_slice(row);
                }
            },
        )?;
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for PlannedPad {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0].datum_type.fact(self.output())))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tract::tract_and_planned;

    /// tract's own Pad and the planned one on the same input.
    fn both(pads: Vec<(usize, usize)>, value: f32, shape: [usize; 4]) -> (Tensor, Tensor, usize) {
        let mut model = TypedModel::default();
        let source = model.add_source("x", f32::fact(shape)).unwrap();
        let pad = Pad {
            pads,
            mode: PadMode::Constant(rctensor0(value)),
        };
        let out = model.wire_node("pad", pad, &[source]).unwrap();
        model.select_output_outlets(&out).unwrap();
        tract_and_planned(model, shape, plan_pads)
    }

    #[test]
    fn a_planned_pad_gives_tracts_values() {
        for (pads, shape) in [
            (vec![(0, 0), (0, 0), (1, 1), (1, 1)], [1, 3, 4, 5]),
            (vec![(0, 0), (0, 0), (2, 0), (0, 3)], [2, 2, 3, 1]),
            (vec![(0, 0), (0, 0), (0, 0), (0, 0)], [1, 1, 2, 2]),
        ] {
            let label = format!("{pads:?} {shape:?}");
            let (tract, planned, replaced) = both(pads, 0.0, shape);
            assert_eq!(replaced, 1, "{label}");
            assert_eq!(tract, planned, "{label}");
        }
    }

    #[test]
    fn a_pad_of_other_values_or_axes_is_left_to_tract() {
        let (_, _, replaced) = both(vec![(0, 0), (0, 0), (1, 1), (1, 1)], 1.0, [1, 1, 2, 2]);
        assert_eq!(replaced, 0);
        let (_, _, replaced) = both(vec![(0, 0), (1, 0), (1, 1), (1, 1)], 0.0, [1, 1, 2, 2]);
        assert_eq!(replaced, 0);
    }
}
