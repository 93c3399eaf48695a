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
//!   (BENCHMARKS.md). The two modes differ only where a side shrinks to one
//!   pixel, which no upsample does; the engines test compares every model.
//!
//! Subgraphs (If, Loop) are not visited: the models here have none.

use anyhow::{Context, Result};
use half::f16;
use prost::Message;
use std::collections::HashSet;
use tract_onnx::pb::tensor_proto::DataType;
use tract_onnx::pb::type_proto::Value;
use tract_onnx::pb::{GraphProto, ModelProto, TensorProto, ValueInfoProto};

const F16: i32 = DataType::Float16 as i32;
const F32: i32 = DataType::Float as i32;

/// The model in `bytes` with only its first output, its upsamples in
/// `half_pixel`, and in f32 if `widen`.
pub fn rewrite(bytes: &[u8], widen: bool) -> Result<Vec<u8>> {
    let mut model = ModelProto::decode(bytes).context("parsing the ONNX file")?;
    let graph = model.graph.as_mut().context("the ONNX file has no graph")?;
    keep_first_output(graph);
    plain_half_pixel(graph);
    if widen {
        widen_fp16(graph);
    }
    Ok(model.encode_to_vec())
}

fn keep_first_output(graph: &mut GraphProto) {
    graph.output.truncate(1);
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
            ModelProto::decode(&rewrite(&model.encode_to_vec(), true).unwrap()[..]).unwrap();
        let graph = widened.graph.unwrap();
        assert_eq!(graph.initializer[0].data_type, F32);
        assert_eq!(graph.initializer[0].float_data, [1.0, -2.5]);
        assert!(graph.initializer[0].raw_data.is_empty());
        assert_eq!(graph.node[0].attribute[0].i, i64::from(F32));
    }
}
