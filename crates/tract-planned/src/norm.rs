//! MODNet's IBNorm as one operator. A convolution's channels are split in
//! two, the first half batch-normalised (an affine per channel), the second
//! instance-normalised over each plane, joined again and put through a
//! ReLU. tract runs that as two Slices, the norms' 2 and 7 operators, a
//! Concat and a Max, each a fresh tensor and most on one core: MODNet's 16
//! took about 50 ms of a 0.34 s run at 640 × 480 (BENCHMARKS.md, "IBNorm
//! in one pass"). `PlannedNorm` reads the convolution's output once per
//! plane, on every core, and writes what the ReLU gave. The affine planes
//! are tract's to the bit; an instance norm's mean and variance are summed
//! in f64 here, in f32 in another order by tract, so they differ from
//! tract's in the last bits.

use super::plane_by_plane::plane_by_plane;
use super::{lone_relu, patch_each};
use std::mem::MaybeUninit;
use tract_core::internal::*;
use tract_core::ops::array::{Slice, TypedConcat};
use tract_core::ops::binary::{BinMiniOp, TypedBinOp};
use tract_core::ops::element_wise::ElementWiseOp;
use tract_core::ops::math::{Add, Mul, Rsqrt, Sub};
use tract_core::ops::nn::{Reduce, Reducer};

/// Puts a `PlannedNorm` in place of every Concat on the channel axis of
/// f32 NCHW tensors, each batch- or instance-normalised, with the ReLU
/// after the Concat when that alone reads it; returns how many.
pub(super) fn plan_norms(model: &mut TypedModel) -> TractResult<usize> {
    patch_each(model, planned_norm)
}

fn planned_norm(model: &TypedModel, node: &TypedNode) -> TractResult<Option<TypedModelPatch>> {
    if node
        .op_as::<TypedConcat>()
        .is_none_or(|concat| concat.axis != 1)
    {
        return Ok(None);
    }
    let Some(parts) = node
        .inputs
        .iter()
        .map(|&part| normalised(model, part))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let (parts, norms): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let norms = norms.concat();
    let inputs = joined_inputs(model, &parts);
    let Some(shapes) = inputs
        .iter()
        .map(|&input| nchw(model, input))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let joined = OutletId::new(node.id, 0);
    let relu = lone_relu(model, joined)?.map(|relu| relu.node);
    let planned = PlannedNorm {
        inputs: shapes,
        norms,
        relu: relu.is_some(),
    };
    let mut patch = TypedModelPatch::default();
    let taps = inputs
        .iter()
        .map(|&input| patch.tap_model(model, input))
        .collect::<TractResult<TVec<_>>>()?;
    let normalised = patch.wire_node(format!("{}.planned", node.name), planned, &taps)?;
    patch.shunt_outside(model, relu.unwrap_or(node.id).into(), normalised[0])?;
    Ok(Some(patch))
}

/// The shape of `outlet`, if it is an f32 NCHW tensor's and known.
fn nchw(model: &TypedModel, outlet: OutletId) -> Option<[usize; 4]> {
    let fact = model.outlet_fact(outlet).ok()?;
    if fact.datum_type != f32::datum_type() {
        return None;
    }
    fact.shape.as_concrete()?.try_into().ok()
}

/// The tensors `parts` are, joined on the channel axis: where they are
/// Slices that in order make the whole of one tensor, that tensor.
fn joined_inputs(model: &TypedModel, parts: &[OutletId]) -> Vec<OutletId> {
    let mut whole = None;
    let mut end = 0;
    for &part in parts {
        match channel_slice(model, part) {
            Some((of, channels)) if channels.start == end && whole.is_none_or(|w| w == of) => {
                whole = Some(of);
                end = channels.end;
            }
            _ => return parts.to_vec(),
        }
    }
    match whole {
        Some(whole) if nchw(model, whole).is_some_and(|shape| shape[1] == end) => vec![whole],
        _ => parts.to_vec(),
    }
}

/// The tensor `outlet` normalises and how, a `Norm` per channel, if it is
/// normalised as tract declutters ONNX's BatchNormalization or its
/// InstanceNormalization without scale and bias.
fn normalised(model: &TypedModel, outlet: OutletId) -> Option<(OutletId, Vec<Norm>)> {
    affine(model, outlet).or_else(|| instance_normalised(model, outlet))
}

/// `x × slope + intercept`, with constants per channel.
fn affine(model: &TypedModel, outlet: OutletId) -> Option<(OutletId, Vec<Norm>)> {
    let (scaled, intercept) = with_constant::<Add>(model, outlet)?;
    let (input, slope) = with_constant::<Mul>(model, scaled)?;
    let channels = nchw(model, input)?[1];
    let per_channel = |values: &Tensor| {
        if values.shape() != [1, channels, 1, 1] {
            return None;
        }
        let plain = values.try_as_plain_ram().ok()?;
        Some(plain.as_slice::<f32>().ok()?.to_vec())
    };
    let norms = per_channel(&slope)?
        .into_iter()
        .zip(per_channel(&intercept)?)
        .map(|(slope, intercept)| Norm::Affine { slope, intercept })
        .collect();
    Some((input, norms))
}

/// `(x − mean) × rsqrt(mean of squares + ε)` over each plane, where
/// `mean` is the plane's sum times the reciprocal of its size.
fn instance_normalised(model: &TypedModel, outlet: OutletId) -> Option<(OutletId, Vec<Norm>)> {
    let [diff, rsqrt] = binary::<Mul>(model, outlet)?;
    let rsqrt = model.node(rsqrt.node);
    let rsqrt_op = rsqrt.op_as::<ElementWiseOp>()?;
    let (variance, epsilon) = with_constant::<Add>(model, rsqrt.inputs[0])?;
    let [input, mean] = binary::<Sub>(model, diff)?;
    let (sum, reciprocal) = with_constant::<Mul>(model, mean)?;
    let [_, channels, height, width] = nchw(model, input)?;
    let epsilon = epsilon.cast_to_scalar::<f32>().ok()?;
    let found = rsqrt_op.0.is::<Rsqrt>()
        && reduced(model, variance, Reducer::MeanOfSquares) == Some(diff)
        && reduced(model, sum, Reducer::Sum) == Some(input)
        && is_all(&reciprocal, 1.0 / (height * width) as f32)
        && epsilon.is_finite();
    found.then(|| (input, vec![Norm::Instance { epsilon }; channels]))
}

/// The inputs of what made `outlet`, if it is the binary operator `O`.
fn binary<O: BinMiniOp>(model: &TypedModel, outlet: OutletId) -> Option<[OutletId; 2]> {
    let node = model.node(outlet.node);
    let op = node.op_as::<TypedBinOp>()?;
    if !op.0.is::<O>() {
        return None;
    }
    node.inputs.as_slice().try_into().ok()
}

/// The first input of what made `outlet` and its second, an f32 constant,
/// if it is the binary operator `O` (tract wires a norm's constants and a
/// ReLU's zero second).
fn with_constant<O: BinMiniOp>(
    model: &TypedModel,
    outlet: OutletId,
) -> Option<(OutletId, Arc<Tensor>)> {
    let [input, constant] = binary::<O>(model, outlet)?;
    let constant = model.outlet_fact(constant).ok()?.konst.clone()?;
    (constant.datum_type() == f32::datum_type()).then_some((input, constant))
}

/// What `outlet` reduces with `reducer` over its height and width.
fn reduced(model: &TypedModel, outlet: OutletId, reducer: Reducer) -> Option<OutletId> {
    let node = model.node(outlet.node);
    let reduce = node.op_as::<Reduce>()?;
    (reduce.reducer == reducer && reduce.axes.as_slice() == [2, 3]).then(|| node.inputs[0])
}

/// What `outlet` slices on the channel axis, and which channels.
fn channel_slice(
    model: &TypedModel,
    outlet: OutletId,
) -> Option<(OutletId, std::ops::Range<usize>)> {
    let node = model.node(outlet.node);
    let slice = node.op_as::<Slice>()?;
    let start = slice.start.to_usize().ok()?;
    let end = slice.end.to_usize().ok()?;
    (slice.axis == 1 && start < end).then_some((node.inputs[0], start..end))
}

fn is_all(values: &Tensor, value: f32) -> bool {
    values.try_as_plain_ram().is_ok_and(|plain| {
        plain
            .as_slice::<f32>()
            .is_ok_and(|values| values.iter().all(|&v| v == value))
    })
}

/// How one channel is normalised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Norm {
    Affine { slope: f32, intercept: f32 },
    Instance { epsilon: f32 },
}

/// NCHW f32 tensors joined on the channel axis, each channel normalised by
/// its `Norm`, then, if `relu`, its negative values made 0.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedNorm {
    inputs: Vec<[usize; 4]>,
    norms: Vec<Norm>,
    relu: bool,
}

// The constants are never NaN (an ONNX norm's would make every value NaN),
// so equality is reflexive, as `Op` needs.
impl Eq for PlannedNorm {}

impl PlannedNorm {
    fn output(&self) -> [usize; 4] {
        let [batch, _, height, width] = self.inputs[0];
        [batch, self.norms.len(), height, width]
    }

    fn normalise_plane(&self, norm: Norm, plane: &[f32], out: &mut [MaybeUninit<f32>]) {
        let relu = |value: f32| if self.relu { value.max(0.0) } else { value };
        match norm {
            Norm::Affine { slope, intercept } => {
                for (out, &value) in out.iter_mut().zip(plane) {
                    out.write(relu(value * slope + intercept));
                }
            }
            Norm::Instance { epsilon } => {
                let len = plane.len() as f64;
                let mean = (sum(plane, f64::from) / len) as f32;
                let variance = sum(plane, |value| f64::from(value - mean).powi(2)) / len;
                let scale = (variance as f32 + epsilon).sqrt().recip();
                for (out, &value) in out.iter_mut().zip(plane) {
                    out.write(relu((value - mean) * scale));
                }
            }
        }
    }
}

/// The sum of `term` over `values`, in eight lanes so that it vectorises.
fn sum(values: &[f32], term: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = values.chunks_exact(lanes.len());
    let rest: f64 = chunks.remainder().iter().map(|&value| term(value)).sum();
    for chunk in chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane += term(value);
        }
    }
    lanes.iter().sum::<f64>() + rest
}

impl Op for PlannedNorm {
    fn name(&self) -> StaticName {
        "PlannedNorm".into()
    }

    op_as_typed_op!();
}

impl EvalOp for PlannedNorm {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let channels = self.norms.len();
        let output = plane_by_plane(
            &inputs,
            &self.inputs,
            self.output(),
            || (),
            |_, index, plane, out| self.normalise_plane(self.norms[index % channels], plane, out),
        )?;
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for PlannedNorm {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0].datum_type.fact(self.output())))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{assert_same_bits, tract_and_planned};
    use tract_onnx::pb::tensor_proto::DataType;
    use tract_onnx::pb::tensor_shape_proto::{dimension, Dimension};
    use tract_onnx::pb::{
        type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
        TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    use tract_onnx::prelude::{Framework, InferenceModel, InferenceModelExt};

    /// One ONNX graph, its nodes and constants built a part at a time.
    #[derive(Default)]
    struct Graph {
        nodes: Vec<NodeProto>,
        constants: Vec<TensorProto>,
    }

    impl Graph {
        fn node(&mut self, op: &str, inputs: &[&str], output: &str) -> &mut NodeProto {
            self.nodes.push(NodeProto {
                op_type: op.into(),
                input: inputs.iter().map(|s| s.to_string()).collect(),
                output: vec![output.into()],
                name: output.into(),
                ..NodeProto::default()
            });
            self.nodes.last_mut().unwrap()
        }

        fn floats(&mut self, name: &str, values: Vec<f32>) -> String {
            self.constants.push(TensorProto {
                name: name.into(),
                data_type: DataType::Float as i32,
                dims: vec![values.len() as i64],
                float_data: values,
                ..TensorProto::default()
            });
            name.into()
        }

        fn ints(&mut self, name: &str, values: Vec<i64>) -> String {
            self.constants.push(TensorProto {
                name: name.into(),
                data_type: DataType::Int64 as i32,
                dims: vec![values.len() as i64],
                int64_data: values,
                ..TensorProto::default()
            });
            name.into()
        }

        /// Channels `from..to` of `x` as `output`.
        fn slice(&mut self, x: &str, from: i64, to: i64, output: &str) {
            let starts = self.ints(&format!("{output}.starts"), vec![from]);
            let ends = self.ints(&format!("{output}.ends"), vec![to]);
            let axes = self.ints(&format!("{output}.axes"), vec![1]);
            self.node("Slice", &[x, &starts, &ends, &axes], output);
        }

        /// ONNX's BatchNormalization of `channels` channels, its statistics made up.
        fn batch_norm(&mut self, x: &str, channels: usize, output: &str) {
            let made_up = |offset: f32| (0..channels).map(|c| offset + c as f32 / 4.0).collect();
            let names: Vec<String> = [("scale", 0.5), ("bias", -0.3), ("mean", 0.2), ("var", 1.5)]
                .into_iter()
                .map(|(what, offset)| self.floats(&format!("{output}.{what}"), made_up(offset)))
                .collect();
            let inputs: Vec<&str> = [x]
                .into_iter()
                .chain(names.iter().map(|s| &s[..]))
                .collect();
            self.node("BatchNormalization", &inputs, output);
        }

        /// ONNX's InstanceNormalization with a `scale` for every channel and no bias.
        fn instance_norm(&mut self, x: &str, channels: usize, scale: f32, output: &str) {
            let scale = self.floats(&format!("{output}.scale"), vec![scale; channels]);
            let bias = self.floats(&format!("{output}.bias"), vec![0.0; channels]);
            self.node("InstanceNormalization", &[x, &scale, &bias], output)
                .attribute
                .push(AttributeProto {
                    name: "epsilon".into(),
                    f: 1e-3,
                    r#type: 1,
                    ..AttributeProto::default()
                });
        }

        fn concat(&mut self, inputs: &[&str], output: &str) {
            self.node("Concat", inputs, output)
                .attribute
                .push(AttributeProto {
                    name: "axis".into(),
                    i: 1,
                    r#type: 2,
                    ..AttributeProto::default()
                });
        }

        /// The graph as tract declutters it, with inputs `inputs` of
        /// `shape` and output `output`.
        fn typed(self, inputs: &[&str], shape: [usize; 4], output: &str) -> TypedModel {
            let named = |name: &str| ValueInfoProto {
                name: name.into(),
                ..ValueInfoProto::default()
            };
            let dim = |size: usize| Dimension {
                value: Some(dimension::Value::DimValue(size as i64)),
                ..Dimension::default()
            };
            let input = |name: &str| ValueInfoProto {
                r#type: Some(TypeProto {
                    value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                        elem_type: DataType::Float as i32,
                        shape: Some(TensorShapeProto {
                            dim: shape.into_iter().map(dim).collect(),
                        }),
                    })),
                    ..TypeProto::default()
                }),
                ..named(name)
            };
            let proto = ModelProto {
                ir_version: 8,
                opset_import: vec![OperatorSetIdProto {
                    domain: String::new(),
                    version: 13,
                }],
                graph: Some(GraphProto {
                    node: self.nodes,
                    initializer: self.constants,
                    input: inputs.iter().map(|name| input(name)).collect(),
                    output: vec![named(output)],
                    ..GraphProto::default()
                }),
                ..ModelProto::default()
            };
            let model: InferenceModel = tract_onnx::onnx().model_for_proto_model(&proto).unwrap();
            model
                .with_output_fact(0, Default::default())
                .unwrap()
                .into_typed()
                .unwrap()
                .into_decluttered()
                .unwrap()
        }
    }

    /// MODNet's IBNorm of `x`'s `channels`: the first `batch` batch-normalised,
    /// the rest instance-normalised, then a ReLU if `relu`.
    fn ibnorm(channels: usize, batch: usize, relu: bool) -> Graph {
        let mut graph = Graph::default();
        graph.slice("x", 0, batch as i64, "first");
        graph.batch_norm("first", batch, "batch");
        graph.slice("x", batch as i64, channels as i64, "rest");
        graph.instance_norm("rest", channels - batch, 1.0, "instance");
        graph.concat(&["batch", "instance"], "joined");
        if relu {
            graph.node("Relu", &["joined"], "relu");
        }
        graph
    }

    /// Runs tract's plan and the planned norms; returns the largest
    /// difference between their values and how many norms were planned.
    fn planned(model: TypedModel, shape: [usize; 4]) -> (f32, Tensor, Tensor, usize) {
        let (tract, planned, replaced) = tract_and_planned(model, shape, plan_norms);
        assert_eq!(tract.shape(), planned.shape());
        let difference = tract
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .zip(planned.to_plain_array_view::<f32>().unwrap().iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        (difference, tract, planned, replaced)
    }

    #[test]
    fn an_ibnorm_is_one_planned_norm_with_tracts_values() {
        for (shape, batch, relu) in [
            ([1, 8, 5, 7], 4, true),
            ([1, 8, 5, 7], 4, false),
            ([2, 5, 3, 33], 2, true),
            ([1, 6, 2, 1], 3, true),
        ] {
            let label = format!("{shape:?} {batch} {relu}");
            let output = if relu { "relu" } else { "joined" };
            let model = ibnorm(shape[1], batch, relu).typed(&["x"], shape, output);
            let (difference, tract, planned, replaced) = planned(model, shape);
            assert_eq!(replaced, 1, "{label}");
            assert!(difference <= 1e-5, "{label}: {difference}");
            let negative = planned
                .to_plain_array_view::<f32>()
                .unwrap()
                .iter()
                .any(|&v| v < 0.0);
            assert_eq!(negative, !relu, "{label}: {tract:?}");
        }
    }

    #[test]
    fn batch_norms_alone_are_tracts_to_the_bit() {
        let shape = [1, 6, 4, 9];
        let mut graph = Graph::default();
        graph.slice("x", 0, 2, "first");
        graph.batch_norm("first", 2, "a");
        graph.slice("x", 2, 6, "rest");
        graph.batch_norm("rest", 4, "b");
        graph.concat(&["a", "b"], "joined");
        graph.node("Relu", &["joined"], "relu");
        let model = graph.typed(&["x"], shape, "relu");
        let (_, tract, planned, replaced) = planned(model, shape);
        assert_eq!(replaced, 1);
        assert_same_bits(&tract, &planned, "two batch norms");
    }

    /// Norms of whole tensors (tract pushes a Slice up through a 1 × 1
    /// convolution), or of slices that leave channels out, read those.
    #[test]
    fn norms_of_other_tensors_or_of_some_channels_read_those() {
        let shape = [1, 4, 6, 5];
        let mut graph = Graph::default();
        graph.node("Neg", &["x"], "y");
        graph.instance_norm("x", 4, 1.0, "a");
        graph.batch_norm("y", 4, "b");
        graph.concat(&["a", "b"], "joined");
        graph.node("Relu", &["joined"], "relu");
        let model = graph.typed(&["x"], shape, "relu");
        let (difference, _, _, replaced) = planned(model, shape);
        assert_eq!(replaced, 1);
        assert!(difference <= 1e-5, "{difference}");

        let mut graph = Graph::default();
        graph.slice("x", 0, 1, "first");
        graph.instance_norm("first", 1, 1.0, "a");
        graph.slice("x", 2, 4, "last");
        graph.batch_norm("last", 2, "b");
        graph.concat(&["b", "a"], "joined");
        let model = graph.typed(&["x"], shape, "joined");
        let (difference, _, _, replaced) = planned(model, shape);
        assert_eq!(replaced, 1);
        assert!(difference <= 1e-5, "{difference}");
    }

    #[test]
    fn an_instance_norm_with_a_scale_or_a_relu_read_twice_is_left_to_tract() {
        let shape = [1, 4, 3, 3];
        let mut graph = Graph::default();
        graph.slice("x", 0, 2, "first");
        graph.batch_norm("first", 2, "batch");
        graph.slice("x", 2, 4, "rest");
        graph.instance_norm("rest", 2, 2.0, "instance");
        graph.concat(&["batch", "instance"], "joined");
        let model = graph.typed(&["x"], shape, "joined");
        let (difference, _, _, replaced) = planned(model, shape);
        assert_eq!((replaced, difference), (0, 0.0));

        // The Concat read by the ReLU and by the output: the norm is
        // planned, the ReLU left to tract.
        let mut graph = ibnorm(4, 2, true);
        graph.node("Add", &["joined", "relu"], "sum");
        let model = graph.typed(&["x"], shape, "sum");
        let (difference, _, _, replaced) = planned(model, shape);
        assert_eq!(replaced, 1);
        assert!(difference <= 1e-5, "{difference}");
    }
}
