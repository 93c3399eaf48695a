//! tract's zero Pad of a convolution's input, run a channel at a time on
//! every core. tract gives each 3x3 convolution it runs as im2col and a
//! matrix product a Pad of its own, and runs it on one core, filling the
//! output with zeros and copying the input into it through ndarray: on
//! IS-Net 114 of them took 0.64 s of a 4.7 s run (BENCHMARKS.md, "tract").
//! Where the padded tensor is a Concat of channels made for that pad
//! alone, the planned pad copies the Concat's inputs in place itself, so
//! the joined tensor is never made (a decoder stage's input in U2Net).
//! A pad that only its convolution's im2col reads is then taken into that
//! im2col (im2col.rs), so the padded tensor is never made either: in the
//! three models every pad is. The planned pad runs where a pad has other
//! readers, or its im2col stays tract's (a grouped convolution's).

use super::plane_by_plane::plane_by_plane;
use super::{put_in_place, read_once};
use std::mem::MaybeUninit;
use tract_core::internal::*;
use tract_core::ops::array::{Pad, PadMode, TypedConcat};

/// Puts a `PlannedPad` in place of every Pad with zeros of an f32 NCHW
/// tensor over its height and width whose shape is known, and joins into it
/// the Concat it alone reads; returns how many pads.
pub(super) fn plan_pads(model: &mut TypedModel) -> TractResult<usize> {
    let planned = put_in_place(model, planned_pad)?;
    join_concats(model)?;
    Ok(planned)
}

/// Gives each `PlannedPad` that alone reads a Concat on the channel axis
/// the Concat's inputs instead; returns how many.
fn join_concats(model: &mut TypedModel) -> TractResult<usize> {
    let mut joined = 0;
    for id in 0..model.nodes.len() {
        let node = &model.nodes[id];
        let Some(pad) = node.op_as::<PlannedPad>() else {
            continue;
        };
        let concatenated = node.inputs[0];
        let concat = model.node(concatenated.node);
        if concat.op_as::<TypedConcat>().is_none_or(|op| op.axis != 1)
            || !read_once(model, concatenated)?
        {
            continue;
        }
        let Some(inputs) = concat
            .inputs
            .iter()
            .map(|&input| {
                let shape = model.outlet_fact(input).ok()?.shape.as_concrete()?;
                <[usize; 4]>::try_from(shape).ok()
            })
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let joining = PlannedPad {
            inputs,
            rows: pad.rows,
            columns: pad.columns,
        };
        let mut patch = TypedModelPatch::default();
        let taps = concat
            .inputs
            .iter()
            .map(|&input| patch.tap_model(model, input))
            .collect::<TractResult<TVec<_>>>()?;
        let padded = patch.wire_node(format!("{}.joined", node.name), joining, &taps)?;
        patch.shunt_outside(model, id.into(), padded[0])?;
        patch.apply(model)?;
        joined += 1;
    }
    Ok(joined)
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
        inputs: vec![[shape[0], shape[1], shape[2], shape[3]]],
        rows: pad.pads[2],
        columns: pad.pads[3],
    }))
}

/// Zeros around each plane of NCHW f32 tensors joined on the channel axis
/// (most often one): `rows` above and below, `columns` left and right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPad {
    pub(super) inputs: Vec<[usize; 4]>,
    pub(super) rows: (usize, usize),
    pub(super) columns: (usize, usize),
}

impl PlannedPad {
    fn output(&self) -> [usize; 4] {
        let [batch, _, height, width] = self.inputs[0];
        [
            batch,
            self.inputs.iter().map(|input| input[1]).sum(),
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
        let [_, _, height, width] = self.inputs[0];
        let output = self.output();
        let out_width = output[3];
        let zero = MaybeUninit::new(0.0);
        let output = plane_by_plane(
            &inputs,
            &self.inputs,
            output,
            || (),
            |_, _, plane, out| {
                let (above, rest) = out.split_at_mut(self.rows.0 * out_width);
                let (inside, below) = rest.split_at_mut(height * out_width);
                above.fill(zero);
                below.fill(zero);
                for (out_row, row) in inside
                    .chunks_exact_mut(out_width)
                    .zip(plane.chunks_exact(width))
                {
                    let (left, rest) = out_row.split_at_mut(self.columns.0);
                    let (middle, right) = rest.split_at_mut(width);
                    left.fill(zero);
                    right.fill(zero);
                    for (out, &value) in middle.iter_mut().zip(row) {
                        out.write(value);
                    }
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
    use crate::tract_and_planned;

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

    /// tract's Concat of `joined` on `axis` then Pad, and the planned pad;
    /// the source is the concat's `source`th input, consts of 3 channels
    /// the others. `consumers` nodes read the concat.
    fn concat_then_pad(
        shape: [usize; 4],
        axis: usize,
        joined: usize,
        source: usize,
        consumers: usize,
    ) -> (Tensor, Tensor, usize) {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(shape)).unwrap();
        let mut inputs = vec![];
        for ix in 0..joined {
            if ix == source {
                inputs.push(x);
                continue;
            }
            let mut other = shape;
            other[axis] = 3;
            let values: Vec<f32> = (0..other.iter().product::<usize>())
                .map(|i| (ix * 1000 + i) as f32)
                .collect();
            let konst = Tensor::from_shape(&other, &values).unwrap();
            inputs.push(model.add_const(format!("c{ix}"), konst).unwrap());
        }
        let concat = model
            .wire_node("concat", TypedConcat { axis }, &inputs)
            .unwrap();
        let mut outputs = vec![];
        for ix in 0..consumers {
            let pad = Pad {
                pads: vec![(0, 0), (0, 0), (1, 2), (2, 1)],
                mode: PadMode::Constant(rctensor0(0f32)),
            };
            outputs.extend(model.wire_node(format!("pad{ix}"), pad, &concat).unwrap());
        }
        model.select_output_outlets(&outputs).unwrap();
        tract_and_planned(model, shape, |model| {
            put_in_place(model, planned_pad)?;
            join_concats(model)
        })
    }

    #[test]
    fn a_concat_of_channels_read_by_its_pad_alone_is_joined_into_it() {
        for (shape, joined, source) in [
            ([1, 2, 3, 4], 2, 0),
            ([1, 2, 3, 4], 3, 1),
            ([2, 1, 2, 3], 3, 2),
        ] {
            let label = format!("{shape:?} {joined} {source}");
            let (tract, planned, joins) = concat_then_pad(shape, 1, joined, source, 1);
            assert_eq!(joins, 1, "{label}");
            assert_eq!(tract, planned, "{label}");
        }
    }

    #[test]
    fn a_concat_read_twice_or_on_another_axis_is_left_to_tract() {
        let (tract, planned, joins) = concat_then_pad([1, 2, 3, 4], 1, 2, 0, 2);
        assert_eq!((joins, &tract), (0, &planned));
        let (tract, planned, joins) = concat_then_pad([1, 2, 3, 4], 2, 2, 0, 1);
        assert_eq!((joins, &tract), (0, &planned));
    }

    #[test]
    fn a_pad_of_other_values_or_axes_is_left_to_tract() {
        let (_, _, replaced) = both(vec![(0, 0), (0, 0), (1, 1), (1, 1)], 1.0, [1, 1, 2, 2]);
        assert_eq!(replaced, 0);
        let (_, _, replaced) = both(vec![(0, 0), (1, 0), (1, 1), (1, 1)], 0.0, [1, 1, 2, 2]);
        assert_eq!(replaced, 0);
    }
}
