//! Rewrites an ONNX graph before ONNX Runtime loads it, so that it runs what
//! tract runs and nothing more:
//! - Only the first output is kept, with the nodes it needs. IS-Net also
//!   computes five deep-supervision mattes, each upsampled to 1024x1024,
//!   that nothing reads; tract skips them once told the one output wanted.
//! - fp16 is widened to f32. IS-Net's file keeps its weights in fp16 and
//!   casts its input and some activations to fp16, so ONNX Runtime rounds
//!   them to 11 significant bits on the way; tract, slow at fp16, converts
//!   the graph to f32. With the same f32 graph the engines agree (the
//!   engines test) and ONNX Runtime is no slower.
//! - Linear Resizes with `pytorch_half_pixel` coordinates say `half_pixel`.
//!   ONNX Runtime runs convolutions on channels in blocks of 8 or 16
//!   (NCHWc) and keeps an upsample in that layout only with `half_pixel`;
//!   otherwise each one converts the layout out and back. U2NetP (exported
//!   by PyTorch) has 38 of them: its run takes 12% less time
//!   (BENCHMARKS.md, "ONNX Runtime's layout"). The two modes differ only
//!   where a side shrinks to one pixel, which no upsample does; the
//!   engines test compares every model.
//! - A convolution over a concatenation of channels whose parts are not
//!   whole blocks runs as one convolution a part, summed: `W * [a, b] =
//!   W_a * a + W_b * b`. Such a concatenation cannot stay in blocks, so
//!   ONNX Runtime ran the convolution in plain layout: MODNet joins its
//!   features with the 3 channels of the photo three times, and the one at
//!   full size took 19 of its 160 ms. Split, its run takes 6% less time
//!   (BENCHMARKS.md, "ONNX Runtime's layout"). The channels of each part are worked out from the
//!   weights and the declared input, through the operators that keep or
//!   join channels; where they cannot be, nothing is split.
//! - A model run at another size than its file declares (IS-Net at the
//!   photo's aspect, U2NetP at 256x256) is declared at that size, or at any
//!   size, and each upsample to a size traced at export is made an upsample
//!   to the size of the tensor it is joined to, or of the input for the
//!   output's own, as IS-Net's PyTorch source (`_upsample_like(src, tar)`)
//!   has it: its file only runs at 1024x1024, the graph itself at any size.
//!   U2NetP's export already takes its upsample sizes from the shapes at run
//!   time. tract loads this rewrite too (`fit_input`). The int8 IS-Net stays
//!   at its file's size: its quantiser folded the sizes into constants, and
//!   it lost quality at other sizes.
//!
//! Subgraphs (If, Loop) are not visited: the models here have none.

use anyhow::{ensure, Context, Result};
use half::f16;
use prost::Message;
use std::collections::{HashMap, HashSet};
use tract_onnx::pb::attribute_proto::AttributeType;
use tract_onnx::pb::tensor_proto::DataType;
use tract_onnx::pb::tensor_shape_proto::dimension;
use tract_onnx::pb::type_proto::Value;
use tract_onnx::pb::ValueInfoProto;
use tract_onnx::pb::{AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};

const F16: i32 = DataType::Float16 as i32;
const F32: i32 = DataType::Float as i32;
const I64: i32 = DataType::Int64 as i32;
/// ONNX Runtime's channel block: 8 with AVX2, 16 with AVX-512.
const BLOCK: i64 = 16;

/// The model in `bytes` with only its first output, its upsamples in
/// `half_pixel`, in f32 if `widen`, its convolutions over unaligned
/// concatenations split, and running at `input` (width, height), or at any
/// size if `None`.
pub fn rewrite(bytes: &[u8], widen: bool, input: Option<(u32, u32)>) -> Result<Vec<u8>> {
    let mut model = ModelProto::decode(bytes).context("parsing the ONNX file")?;
    let graph = model.graph.as_mut().context("the ONNX file has no graph")?;
    keep_first_output(graph);
    plain_half_pixel(graph);
    if widen {
        widen_fp16(graph);
    }
    split_convolutions_over_concats(graph);
    fit_graph_input(graph, input)?;
    Ok(model.encode_to_vec())
}

/// `model`, otherwise unchanged, made to run at `input` (width, height), or
/// at any size if `None`.
pub fn fit_input(model: &mut ModelProto, input: Option<(u32, u32)>) -> Result<()> {
    let graph = model.graph.as_mut().context("the ONNX file has no graph")?;
    fit_graph_input(graph, input)
}

/// A model run at its file's own size is left as exported: the int8
/// IS-Net's upsample sizes are constants and could not follow another.
fn fit_graph_input(graph: &mut GraphProto, input: Option<(u32, u32)>) -> Result<()> {
    let wanted = input.map(|(width, height)| vec![i64::from(height), i64::from(width)]);
    if image_input(graph).and_then(spatial_dims) == wanted {
        return Ok(());
    }
    sizes_from_targets(graph)?;
    let image = image_input(graph)
        .context("the graph has no input")?
        .name
        .clone();
    for info in graph.input.iter_mut().filter(|i| i.name == image) {
        declare_spatial_dims(info, wanted.as_deref());
    }
    for info in graph.output.iter_mut() {
        declare_spatial_dims(info, None);
    }
    Ok(())
}

/// The graph's first input that is not a weight: the image.
fn image_input(graph: &GraphProto) -> Option<&ValueInfoProto> {
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    graph
        .input
        .iter()
        .find(|i| !initializers.contains(i.name.as_str()))
}

/// Nodes a value passes through unchanged in size on its way from an
/// upsample to the concatenation that joins it (IS-Net's fp16 casts).
const SIZE_KEEPING: [&str; 1] = ["Cast"];

/// Every Resize whose `sizes` are a constant height and width joined to
/// its input's batch and channels takes them from its target
/// instead: the other input of the concatenation its output is joined by,
/// or else the graph's input where they are the declared input size. Sizes
/// worked out otherwise are left to do so at run time (U2NetP's come from
/// its values' shapes). An error where the sizes are one constant or an
/// upsample's target cannot be found: the model cannot run at other sizes.
fn sizes_from_targets(graph: &mut GraphProto) -> Result<()> {
    let image = image_input(graph).context("the graph has no input")?;
    let declared = spatial_dims(image);
    let image = image.name.clone();
    let constants = int_constants(graph);
    let producers: HashMap<&str, &NodeProto> = (graph.node.iter())
        .flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n)))
        .collect();
    let mut readers: HashMap<&str, Vec<&NodeProto>> = HashMap::new();
    for node in &graph.node {
        for input in &node.input {
            readers.entry(input.as_str()).or_default().push(node);
        }
    }
    // The traced height and width, joined to the input's batch and channels.
    let traced = |sizes: &str| -> Option<Vec<i64>> {
        let join = producers
            .get(sizes)
            .filter(|n| n.op_type == "Concat" && n.input.len() == 2)?;
        constants
            .get(join.input[1].as_str())
            .filter(|v| v.len() == 2)
            .cloned()
    };
    // (the Resize's index, its source, its target)
    let mut retargets: Vec<(usize, String, String)> = Vec::new();
    for (index, resize) in graph
        .node
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op_type == "Resize")
    {
        let Some(sizes) = resize.input.get(3).filter(|s| !s.is_empty()) else {
            continue;
        };
        let Some(baked) = traced(sizes) else {
            ensure!(
                !constants.contains_key(sizes.as_str()),
                "{}: its sizes are one constant",
                resize.name
            );
            continue;
        };
        let mut value = resize.output[0].as_str();
        let target = loop {
            match readers.get(value).map_or(&[][..], Vec::as_slice) {
                [one] if SIZE_KEEPING.contains(&one.op_type.as_str()) => value = &one.output[0],
                [one] if one.op_type == "Concat" && one.input.len() == 2 => {
                    break Some(if one.input[0] == value {
                        &one.input[1]
                    } else {
                        &one.input[0]
                    });
                }
                _ => break (Some(&baked) == declared.as_ref()).then_some(&image),
            }
        };
        let target = target
            .with_context(|| format!("{}: what it upsamples to is not known", resize.name))?;
        retargets.push((index, resize.input[0].clone(), target.clone()));
    }
    let slice = |graph: &mut GraphProto, of: String, from: &str, to: &str, name: String| {
        let shape = format!("{name}_shape");
        graph.node.push(NodeProto {
            name: shape.clone(),
            op_type: "Shape".into(),
            input: vec![of],
            output: vec![shape.clone()],
            ..NodeProto::default()
        });
        graph.node.push(NodeProto {
            name: name.clone(),
            op_type: "Slice".into(),
            input: vec![shape, from.into(), to.into(), "any_size_0".into()],
            output: vec![name],
            ..NodeProto::default()
        });
    };
    for (k, (index, source, target)) in retargets.into_iter().enumerate() {
        let (kept, size, sizes) = (
            format!("any_size{k}_batch_channels"),
            format!("any_size{k}_height_width"),
            format!("any_size{k}_sizes"),
        );
        slice(graph, source, "any_size_0", "any_size_2", kept.clone());
        slice(graph, target, "any_size_2", "any_size_4", size.clone());
        graph.node.push(NodeProto {
            name: sizes.clone(),
            op_type: "Concat".into(),
            input: vec![kept, size],
            output: vec![sizes.clone()],
            attribute: vec![AttributeProto {
                name: "axis".into(),
                i: 0,
                r#type: AttributeType::Int as i32,
                ..AttributeProto::default()
            }],
            ..NodeProto::default()
        });
        graph.node[index].input[3] = sizes;
    }
    for value in [0, 2, 4] {
        graph.initializer.push(TensorProto {
            name: format!("any_size_{value}"),
            dims: vec![1],
            data_type: I64,
            int64_data: vec![value],
            ..TensorProto::default()
        });
    }
    // The traced sizes, and the traced shapes of the values between, are
    // now unused or wrong.
    drop_unneeded(graph);
    graph.value_info.clear();
    Ok(())
}

/// The graph's integer constants, initializers and Constant nodes, by name.
fn int_constants(graph: &GraphProto) -> HashMap<&str, Vec<i64>> {
    let mut constants: HashMap<&str, Vec<i64>> = HashMap::new();
    for tensor in &graph.initializer {
        constants.extend(ints(tensor).map(|v| (tensor.name.as_str(), v)));
    }
    for node in graph.node.iter().filter(|n| n.op_type == "Constant") {
        let value = attribute(node, "value")
            .and_then(|a| a.t.as_ref())
            .and_then(ints);
        constants.extend(value.map(|v| (node.output[0].as_str(), v)));
    }
    constants
}

/// A declared NCHW value's height and width, where both are numbers.
fn spatial_dims(info: &ValueInfoProto) -> Option<Vec<i64>> {
    let Some(Value::TensorType(tensor)) = info.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return None;
    };
    let dims = &tensor.shape.as_ref()?.dim;
    (dims.len() == 4).then_some(())?;
    dims[2..]
        .iter()
        .map(|d| match d.value {
            Some(dimension::Value::DimValue(v)) => Some(v),
            _ => None,
        })
        .collect()
}

/// Declares an NCHW value's height and width: `size`, or free if `None`.
fn declare_spatial_dims(info: &mut ValueInfoProto, size: Option<&[i64]>) {
    if let Some(Value::TensorType(tensor)) = info.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        if let Some(shape) = tensor.shape.as_mut().filter(|s| s.dim.len() == 4) {
            for (k, dim) in shape.dim[2..].iter_mut().enumerate() {
                dim.value = Some(match size {
                    Some(size) => dimension::Value::DimValue(size[k]),
                    None => dimension::Value::DimParam(["height", "width"][k].into()),
                });
            }
        }
    }
}

fn keep_first_output(graph: &mut GraphProto) {
    graph.output.truncate(1);
    drop_unneeded(graph);
}

/// Drops the nodes and initializers no output needs.
fn drop_unneeded(graph: &mut GraphProto) {
    let mut needed: HashSet<String> = graph.output.iter().map(|o| o.name.clone()).collect();
    // Producers are not always listed before their consumers (IS-Net's
    // casts come last), so sweep until nothing more is needed.
    let mut keep = vec![false; graph.node.len()];
    let mut grew = true;
    while grew {
        grew = false;
        for (i, node) in graph.node.iter().enumerate().rev() {
            if !keep[i] && node.output.iter().any(|o| needed.contains(o)) {
                keep[i] = true;
                needed.extend(node.input.iter().cloned());
                grew = true;
            }
        }
    }
    let mut keep = keep.into_iter();
    graph.node.retain(|_| keep.next() == Some(true));
    graph.initializer.retain(|t| needed.contains(&t.name));
    graph.value_info.retain(|v| needed.contains(&v.name));
}

fn plain_half_pixel(graph: &mut GraphProto) {
    let resizes = graph.node.iter_mut().filter(|n| n.op_type == "Resize");
    for attribute in resizes.flat_map(|n| &mut n.attribute) {
        if attribute.name == "coordinate_transformation_mode"
            && attribute.s == b"pytorch_half_pixel"
        {
            attribute.s = b"half_pixel".to_vec();
        }
    }
}

fn split_convolutions_over_concats(graph: &mut GraphProto) {
    let mut splits = plan_splits(graph);
    if splits.is_empty() {
        return;
    }
    let concats: HashSet<usize> = splits.values().map(|s| s.concat).collect();
    let mut nodes = Vec::with_capacity(graph.node.len() + 2 * splits.len());
    for (index, conv) in std::mem::take(&mut graph.node).into_iter().enumerate() {
        if concats.contains(&index) {
            continue;
        }
        let Some(split) = splits.remove(&index) else {
            nodes.push(conv);
            continue;
        };
        let out = &conv.output[0];
        let mut parts = Vec::with_capacity(split.inputs.len());
        for (k, (input, weight)) in split.inputs.into_iter().zip(split.weights).enumerate() {
            let (name, part) = (format!("{out}_part{k}_weight"), format!("{out}_part{k}"));
            graph.initializer.push(TensorProto {
                name: name.clone(),
                ..weight
            });
            let mut inputs = vec![input, name];
            if k == 0 {
                inputs.extend(conv.input.get(2).cloned()); // the bias, once
            }
            nodes.push(NodeProto {
                name: part.clone(),
                input: inputs,
                output: vec![part.clone()],
                ..conv.clone()
            });
            parts.push(part);
        }
        let mut sum = parts[0].clone();
        for (k, part) in parts.iter().enumerate().skip(1) {
            let total = match k + 1 == parts.len() {
                true => out.clone(),
                false => format!("{out}_sum{k}"),
            };
            nodes.push(NodeProto {
                name: total.clone(),
                op_type: "Add".into(),
                input: vec![sum, part.clone()],
                output: vec![total.clone()],
                ..NodeProto::default()
            });
            sum = total;
        }
    }
    graph.node = nodes;
    let used: HashSet<&String> = graph.node.iter().flat_map(|n| &n.input).collect();
    graph.initializer.retain(|t| used.contains(&t.name));
}

struct Split {
    /// The concatenation's index, its inputs, and the weights of each part
    /// (not yet named).
    concat: usize,
    inputs: Vec<String>,
    weights: Vec<TensorProto>,
}

/// The convolutions to split, by index.
fn plan_splits(graph: &GraphProto) -> HashMap<usize, Split> {
    let weights = initializers(graph);
    let channels = channels(graph, &weights);
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for input in graph.node.iter().flat_map(|n| &n.input) {
        *readers.entry(input.as_str()).or_default() += 1;
    }
    let producers: HashMap<&str, usize> = (graph.node.iter().enumerate())
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut splits = HashMap::new();
    for (index, conv) in graph.node.iter().enumerate() {
        if conv.op_type != "Conv" || int(conv, "group").is_some_and(|g| g != 1) {
            continue;
        }
        let Some(&concat) = conv.input.first().and_then(|i| producers.get(i.as_str())) else {
            continue;
        };
        let node = &graph.node[concat];
        let parts: Option<Vec<i64>> = node
            .input
            .iter()
            .map(|i| channels.get(i).copied())
            .collect();
        let weight = conv.input.get(1).and_then(|w| weights.get(w.as_str()));
        let (Some(parts), Some(weight)) = (parts, weight) else {
            continue;
        };
        // Only where the concatenation is what keeps the convolution out of
        // blocks: its parts unaligned, its output whole blocks.
        if node.op_type != "Concat"
            || int(node, "axis") != Some(1)
            || readers.get(conv.input[0].as_str()) != Some(&1)
            || parts.iter().all(|c| c % BLOCK == 0)
            || weight.dims.first().is_none_or(|out| out % BLOCK != 0)
        {
            continue;
        }
        if let Some(weights) = slice_input_channels(weight, &parts) {
            let inputs = node.input.clone();
            splits.insert(
                index,
                Split {
                    concat,
                    inputs,
                    weights,
                },
            );
        }
    }
    splits
}

fn initializers(graph: &GraphProto) -> HashMap<&str, &TensorProto> {
    graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect()
}

/// A convolution's weights `[out, in, kh, kw]` cut along `in` into `parts`.
fn slice_input_channels(weight: &TensorProto, parts: &[i64]) -> Option<Vec<TensorProto>> {
    let values = floats(weight)?;
    let [outputs, inputs, kh, kw] = weight.dims[..] else {
        return None;
    };
    if parts.iter().sum::<i64>() != inputs || values.len() as i64 != outputs * inputs * kh * kw {
        return None;
    }
    let (inputs, window) = (inputs as usize, (kh * kw) as usize);
    let mut start = 0;
    let sliced = parts.iter().map(|&part| {
        let part_len = part as usize * window;
        let float_data = values
            .chunks_exact(inputs * window)
            .flat_map(|filter| &filter[start..start + part_len])
            .copied()
            .collect();
        start += part_len;
        TensorProto {
            data_type: F32,
            dims: vec![outputs, part, kh, kw],
            float_data,
            ..TensorProto::default()
        }
    });
    Some(sliced.collect())
}

/// The number of channels (dimension 1) of every tensor that can be told
/// without running the graph: from the declared inputs, the convolutions'
/// weights, and the operators in between that keep or join channels.
fn channels(graph: &GraphProto, weights: &HashMap<&str, &TensorProto>) -> HashMap<String, i64> {
    let mut known: HashMap<String, i64> = HashMap::new();
    for input in &graph.input {
        if let Some(Value::TensorType(tensor)) =
            input.r#type.as_ref().and_then(|t| t.value.as_ref())
        {
            let dim = tensor.shape.as_ref().and_then(|s| s.dim.get(1));
            if let Some(dimension::Value::DimValue(c)) = dim.and_then(|d| d.value.as_ref()) {
                known.insert(input.name.clone(), *c);
            }
        }
    }
    let constants = int_constants(graph);
    // Producers may be listed after their consumers: sweep until nothing is learnt.
    let mut learnt = true;
    while learnt {
        learnt = false;
        for node in &graph.node {
            let Some(output) = node.output.first() else {
                continue;
            };
            if known.contains_key(output) {
                continue;
            }
            let of = |i: usize| node.input.get(i).and_then(|name| known.get(name)).copied();
            let count = match node.op_type.as_str() {
                "Conv" => (node.input.get(1))
                    .and_then(|w| weights.get(w.as_str()))
                    .and_then(|w| w.dims.first().copied()),
                "Concat" if int(node, "axis") == Some(1) => {
                    (0..node.input.len()).map(of).sum::<Option<i64>>()
                }
                "Slice" => of(0).and_then(|c| sliced_channels(node, c, &constants)),
                "Relu"
                | "Clip"
                | "Sigmoid"
                | "Tanh"
                | "LeakyRelu"
                | "BatchNormalization"
                | "InstanceNormalization"
                | "Resize"
                | "Upsample"
                | "MaxPool"
                | "AveragePool"
                | "Identity" => of(0),
                _ => None,
            };
            if let Some(count) = count {
                known.insert(output.clone(), count);
                learnt = true;
            }
        }
    }
    known
}

/// What a Slice leaves of `channels` channels, where its bounds are constants.
fn sliced_channels(
    node: &NodeProto,
    channels: i64,
    constants: &HashMap<&str, Vec<i64>>,
) -> Option<i64> {
    let constant = |i: usize| {
        node.input
            .get(i)
            .and_then(|name| constants.get(name.as_str()))
    };
    let (starts, ends) = (constant(1)?, constant(2)?);
    let axes = match node.input.get(3) {
        Some(_) => constant(3)?.clone(),
        None => (0..starts.len() as i64).collect(),
    };
    let Some(k) = axes.iter().position(|&a| a == 1) else {
        return Some(channels);
    };
    if node.input.get(4).is_some() && constant(4)?.get(k) != Some(&1) {
        return None; // steps other than 1
    }
    let clamp = |v: i64| if v < 0 { v + channels } else { v }.clamp(0, channels);
    Some((clamp(*ends.get(k)?) - clamp(*starts.get(k)?)).max(0))
}

fn attribute<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn int(node: &NodeProto, name: &str) -> Option<i64> {
    attribute(node, name).map(|a| a.i)
}

fn floats(tensor: &TensorProto) -> Option<Vec<f32>> {
    (tensor.data_type == F32)
        .then(|| values(&tensor.float_data, &tensor.raw_data, f32::from_le_bytes))
}

fn ints(tensor: &TensorProto) -> Option<Vec<i64>> {
    (tensor.data_type == I64)
        .then(|| values(&tensor.int64_data, &tensor.raw_data, i64::from_le_bytes))
}

/// A tensor's values: its typed field, or else its little-endian bytes.
fn values<T: Copy, const N: usize>(typed: &[T], raw: &[u8], from_le: fn([u8; N]) -> T) -> Vec<T> {
    if !typed.is_empty() {
        return typed.to_vec();
    }
    let bytes = raw.chunks_exact(N);
    bytes
        .map(|b| from_le(b.try_into().expect("N bytes")))
        .collect()
}

fn widen_fp16(graph: &mut GraphProto) {
    graph.initializer.iter_mut().for_each(widen_tensor);
    for attribute in graph.node.iter_mut().flat_map(|n| &mut n.attribute) {
        if attribute.name == "to" && attribute.i == i64::from(F16) {
            attribute.i = i64::from(F32);
        }
        if let Some(tensor) = attribute.t.as_mut() {
            widen_tensor(tensor);
        }
    }
    let declared = graph.input.iter_mut();
    declared
        .chain(graph.output.iter_mut())
        .chain(graph.value_info.iter_mut())
        .for_each(widen_declared);
}

fn widen_tensor(tensor: &mut TensorProto) {
    if tensor.data_type != F16 {
        return;
    }
    // fp16 values are stored as little-endian bytes, or one to an int32.
    let halves: Vec<u16> = if tensor.raw_data.is_empty() {
        tensor.int32_data.iter().map(|&v| v as u16).collect()
    } else {
        tensor
            .raw_data
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    };
    tensor.float_data = halves
        .into_iter()
        .map(|h| f16::from_bits(h).to_f32())
        .collect();
    tensor.raw_data.clear();
    tensor.int32_data.clear();
    tensor.data_type = F32;
}

fn widen_declared(info: &mut ValueInfoProto) {
    if let Some(Value::TensorType(tensor)) = info.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        if tensor.elem_type == F16 {
            tensor.elem_type = F32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::pb::{AttributeProto, GraphProto, NodeProto};

    fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            ..NodeProto::default()
        }
    }

    fn named(name: &str) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            ..ValueInfoProto::default()
        }
    }

    #[test]
    fn only_the_first_output_and_what_it_needs_are_kept() {
        let weight = |name: &str| TensorProto {
            name: name.into(),
            ..TensorProto::default()
        };
        let mut graph = GraphProto {
            node: vec![
                node("Sigmoid", &["features"], "d1"),
                node("Conv", &["features", "w2"], "side"),
                node("Sigmoid", &["side"], "d2"),
                node("Conv", &["input", "w1"], "features"),
            ],
            initializer: vec![weight("w1"), weight("w2")],
            output: vec![named("d1"), named("d2")],
            ..GraphProto::default()
        };
        keep_first_output(&mut graph);
        let outputs: Vec<&str> = graph.node.iter().map(|n| n.output[0].as_str()).collect();
        assert_eq!(outputs, ["d1", "features"], "kept in their order");
        assert_eq!(graph.initializer.len(), 1);
        assert_eq!(graph.initializer[0].name, "w1");
        assert_eq!(graph.output.len(), 1);
    }

    #[test]
    fn resizes_say_half_pixel_for_pytorch_half_pixel() {
        let mode = |op: &str, value: &str| NodeProto {
            attribute: vec![AttributeProto {
                name: "coordinate_transformation_mode".into(),
                s: value.as_bytes().to_vec(),
                ..AttributeProto::default()
            }],
            ..node(op, &["x"], "y")
        };
        let mut graph = GraphProto {
            node: vec![
                mode("Resize", "pytorch_half_pixel"),
                mode("Resize", "align_corners"),
                mode("Other", "pytorch_half_pixel"),
            ],
            ..GraphProto::default()
        };
        plain_half_pixel(&mut graph);
        let modes: Vec<&[u8]> = graph.node.iter().map(|n| &n.attribute[0].s[..]).collect();
        assert_eq!(
            modes,
            [&b"half_pixel"[..], b"align_corners", b"pytorch_half_pixel"]
        );
    }

    fn floats_tensor(name: &str, dims: Vec<i64>) -> TensorProto {
        let len: i64 = dims.iter().product();
        TensorProto {
            name: name.into(),
            data_type: F32,
            dims,
            float_data: (0..len).map(|v| v as f32).collect(),
            ..TensorProto::default()
        }
    }

    fn int_attribute(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            i,
            ..AttributeProto::default()
        }
    }

    fn image_input() -> ValueInfoProto {
        use tract_onnx::pb::tensor_shape_proto::Dimension;
        use tract_onnx::pb::{type_proto, TensorShapeProto, TypeProto};
        let dim = |value| Dimension {
            value: Some(value),
            ..Dimension::default()
        };
        let shape = TensorShapeProto {
            dim: vec![
                dim(dimension::Value::DimParam("batch".into())),
                dim(dimension::Value::DimValue(3)),
            ],
        };
        ValueInfoProto {
            r#type: Some(TypeProto {
                value: Some(Value::TensorType(type_proto::Tensor {
                    elem_type: F32,
                    shape: Some(shape),
                })),
                ..TypeProto::default()
            }),
            ..named("image")
        }
    }

    /// IS-Net's pattern at a declared 64x64: a deep value upsampled to the
    /// traced size of the encoder's (half the input's, 32x32) and joined to
    /// it through a cast, and the output upsampled to the traced input size.
    fn upsampled_to_traced_sizes() -> GraphProto {
        use tract_onnx::pb::tensor_shape_proto::Dimension;
        let constant = |output: &str, values: Vec<i64>| NodeProto {
            attribute: vec![AttributeProto {
                name: "value".into(),
                t: Some(TensorProto {
                    dims: vec![values.len() as i64],
                    data_type: I64,
                    int64_data: values,
                    ..TensorProto::default()
                }),
                ..AttributeProto::default()
            }],
            ..node("Constant", &[], output)
        };
        let mut image = image_input();
        if let Some(Value::TensorType(tensor)) =
            image.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            let shape = tensor.shape.as_mut().unwrap();
            for _ in 0..2 {
                shape.dim.push(Dimension {
                    value: Some(dimension::Value::DimValue(64)),
                    ..Dimension::default()
                });
            }
        }
        GraphProto {
            node: vec![
                node("Conv", &["image", "w"], "encoded"),
                node("MaxPool", &["encoded"], "deep"),
                node("Shape", &["deep"], "deep_shape"),
                node(
                    "Slice",
                    &["deep_shape", "zero", "two", "zero"],
                    "batch_channels",
                ),
                constant("traced", vec![32, 32]),
                node("Concat", &["batch_channels", "traced"], "sizes"),
                node("Resize", &["deep", "", "", "sizes"], "up"),
                node("Cast", &["up"], "up_cast"),
                node("Concat", &["up_cast", "encoded"], "joined"),
                node("Resize", &["joined", "", "", "sizes_out"], "matte"),
                constant("traced_out", vec![64, 64]),
                node("Concat", &["batch_channels", "traced_out"], "sizes_out"),
            ],
            input: vec![image.clone()],
            output: vec![ValueInfoProto {
                name: "matte".into(),
                ..image
            }],
            value_info: vec![named("deep")],
            ..GraphProto::default()
        }
    }

    #[test]
    fn upsamples_take_the_size_of_what_they_are_joined_to() {
        let mut graph = upsampled_to_traced_sizes();
        fit_graph_input(&mut graph, None).unwrap();
        let made = |output: &str| graph.node.iter().find(|n| n.output[0] == output).unwrap();
        // A Resize's sizes: the (batch, channels) of its source's shape and
        // the (height, width) of its target's.
        let sizes_of = |resized: &str| {
            let sizes = made(&made(resized).input[3]);
            assert_eq!(sizes.op_type, "Concat");
            let shape_of = |part: &str| {
                let slice = made(part);
                assert_eq!(slice.op_type, "Slice");
                let shape = made(&slice.input[0]);
                assert_eq!(shape.op_type, "Shape");
                shape.input[0].clone()
            };
            (shape_of(&sizes.input[0]), shape_of(&sizes.input[1]))
        };
        assert_eq!(
            sizes_of("up"),
            ("deep".into(), "encoded".into()),
            "joined to `encoded`"
        );
        assert_eq!(
            sizes_of("matte"),
            ("joined".into(), "image".into()),
            "the output: the input's size"
        );
        let names: Vec<&str> = graph.node.iter().map(|n| n.output[0].as_str()).collect();
        assert!(
            !names.contains(&"traced") && !names.contains(&"sizes"),
            "the traced sizes are gone"
        );
        assert!(graph.value_info.is_empty(), "traced shapes are dropped");
        assert_eq!(
            spatial_dims(&graph.input[0]),
            None,
            "the input's size is free"
        );
    }

    #[test]
    fn a_fixed_size_is_declared_and_the_declared_size_changes_nothing() {
        let mut graph = upsampled_to_traced_sizes();
        fit_graph_input(&mut graph, Some((64, 64))).unwrap();
        assert_eq!(graph, upsampled_to_traced_sizes(), "already 64x64");
        fit_graph_input(&mut graph, Some((48, 32))).unwrap();
        assert_eq!(spatial_dims(&graph.input[0]), Some(vec![32, 48]));
        assert_eq!(spatial_dims(&graph.output[0]), None, "the output's is free");
        let sizes = &graph
            .node
            .iter()
            .find(|n| n.output[0] == "up")
            .unwrap()
            .input[3];
        assert_eq!(sizes, "any_size0_sizes", "traced sizes are retargeted");
    }

    #[test]
    fn sizes_worked_out_at_run_time_are_left_and_one_constant_is_an_error() {
        // U2NetP's pattern: the sizes come from the target's shape.
        let mut graph = upsampled_to_traced_sizes();
        graph.node.retain(|n| n.output[0] != "traced");
        graph
            .node
            .push(node("Shape", &["encoded"], "encoded_shape"));
        graph.node.push(node(
            "Slice",
            &["encoded_shape", "two", "four", "zero"],
            "traced",
        ));
        fit_graph_input(&mut graph, None).unwrap();
        let up = graph.node.iter().find(|n| n.output[0] == "up").unwrap();
        assert_eq!(up.input[3], "sizes", "left as exported");

        let mut graph = upsampled_to_traced_sizes();
        graph.initializer.push(TensorProto {
            name: "one_constant".into(),
            dims: vec![4],
            data_type: I64,
            int64_data: vec![1, 3, 32, 32],
            ..TensorProto::default()
        });
        graph
            .node
            .iter_mut()
            .find(|n| n.output[0] == "up")
            .unwrap()
            .input[3] = "one_constant".into();
        let error = fit_graph_input(&mut graph, None).unwrap_err();
        assert!(
            format!("{error}").contains("its sizes are one constant"),
            "{error}"
        );
    }

    #[test]
    fn an_upsample_to_an_unknown_target_is_an_error() {
        let mut graph = upsampled_to_traced_sizes();
        // The joined value read by two nodes: what it upsamples to is unclear.
        graph.node.push(node("Sigmoid", &["up_cast"], "elsewhere"));
        let error = sizes_from_targets(&mut graph).unwrap_err();
        assert!(
            format!("{error}").contains("what it upsamples to is not known"),
            "{error}"
        );
    }

    /// The photo (3 channels) joined to 16 channels of features, then
    /// convolved to 16: MODNet's pattern.
    fn photo_joined_to_features() -> GraphProto {
        let axis = NodeProto {
            attribute: vec![int_attribute("axis", 1)],
            ..node("Concat", &["features", "image"], "joined")
        };
        GraphProto {
            node: vec![
                node("Conv", &["joined", "w2", "b2"], "out"),
                axis,
                node("Conv", &["image", "w1"], "features"),
            ],
            initializer: vec![
                floats_tensor("w1", vec![16, 3, 3, 3]),
                floats_tensor("w2", vec![16, 19, 3, 3]),
                floats_tensor("b2", vec![16]),
            ],
            input: vec![image_input()],
            output: vec![named("out")],
            ..GraphProto::default()
        }
    }

    #[test]
    fn a_convolution_over_unaligned_channels_runs_a_part_at_a_time() {
        let mut graph = photo_joined_to_features();
        split_convolutions_over_concats(&mut graph);
        let ops: Vec<(&str, Vec<&str>)> = graph
            .node
            .iter()
            .map(|n| {
                (
                    n.op_type.as_str(),
                    n.input.iter().map(|i| i.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            ops,
            [
                ("Conv", vec!["features", "out_part0_weight", "b2"]),
                ("Conv", vec!["image", "out_part1_weight"]),
                ("Add", vec!["out_part0", "out_part1"]),
                ("Conv", vec!["image", "w1"]),
            ]
        );
        assert_eq!(graph.node[2].output, ["out"]);
        let weight = |name: &str| graph.initializer.iter().find(|t| t.name == name).unwrap();
        assert!(graph.initializer.iter().all(|t| t.name != "w2"), "unused");
        // w2's filter for output o starts at o * 19 * 9: the features' 16
        // channels first, then the photo's 3.
        let (features, photo) = (weight("out_part0_weight"), weight("out_part1_weight"));
        assert_eq!(
            (&features.dims[..], &photo.dims[..]),
            (&[16, 16, 3, 3][..], &[16, 3, 3, 3][..])
        );
        assert_eq!(features.float_data[..2], [0.0, 1.0]);
        assert_eq!(features.float_data[144], 171.0, "output 1's first weight");
        assert_eq!(photo.float_data[0], 144.0, "after 16 channels of 9");
        assert_eq!(photo.float_data[27], 171.0 + 144.0);
    }

    #[test]
    fn aligned_or_unknown_channels_are_left_joined() {
        let mut aligned = photo_joined_to_features();
        aligned.node[1].input = vec!["features".into(), "features".into()];
        aligned.initializer[1] = floats_tensor("w2", vec![16, 32, 3, 3]);
        let mut unknown = photo_joined_to_features();
        unknown.input.clear();
        for mut graph in [aligned, unknown] {
            let before = graph.clone();
            split_convolutions_over_concats(&mut graph);
            assert_eq!(graph, before);
        }
    }

    #[test]
    fn channels_follow_slices_joins_and_activations() {
        let constant = |name: &str, value: i64| NodeProto {
            attribute: vec![AttributeProto {
                name: "value".into(),
                t: Some(TensorProto {
                    data_type: I64,
                    dims: vec![1],
                    raw_data: value.to_le_bytes().to_vec(),
                    ..TensorProto::default()
                }),
                ..AttributeProto::default()
            }],
            ..node("Constant", &[], name)
        };
        let join = NodeProto {
            attribute: vec![int_attribute("axis", 1)],
            ..node("Concat", &["half", "image"], "joined")
        };
        let graph = GraphProto {
            node: vec![
                node("Relu", &["joined"], "relu"),
                join,
                node("Slice", &["features", "start", "end", "axis"], "half"),
                constant("start", 8),
                constant("end", i64::MAX),
                constant("axis", 1),
                node("Conv", &["image", "w1"], "features"),
            ],
            initializer: vec![floats_tensor("w1", vec![16, 3, 3, 3])],
            input: vec![image_input()],
            ..GraphProto::default()
        };
        let known = channels(&graph, &initializers(&graph));
        let count = |name: &str| known.get(name).copied();
        assert_eq!(count("features"), Some(16));
        assert_eq!(count("half"), Some(8));
        assert_eq!(count("relu"), Some(11));
    }

    #[test]
    fn fp16_weights_casts_and_types_become_f32() {
        let weight = TensorProto {
            name: "w".into(),
            data_type: F16,
            dims: vec![2],
            // 1.0 and -2.5 in fp16, little-endian
            raw_data: vec![0x00, 0x3c, 0x00, 0xc1],
            ..TensorProto::default()
        };
        let cast = NodeProto {
            attribute: vec![AttributeProto {
                name: "to".into(),
                i: i64::from(F16),
                ..AttributeProto::default()
            }],
            ..node("Cast", &["w"], "y")
        };
        let model = ModelProto {
            graph: Some(GraphProto {
                initializer: vec![weight],
                node: vec![cast],
                output: vec![named("y")],
                ..GraphProto::default()
            }),
            ..ModelProto::default()
        };
        let widened =
            ModelProto::decode(&rewrite(&model.encode_to_vec(), true, None).unwrap()[..]).unwrap();
        let graph = widened.graph.unwrap();
        assert_eq!(graph.initializer[0].data_type, F32);
        assert_eq!(graph.initializer[0].float_data, [1.0, -2.5]);
        assert!(graph.initializer[0].raw_data.is_empty());
        assert_eq!(graph.node[0].attribute[0].i, i64::from(F32));
    }
}
