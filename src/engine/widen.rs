//! Widens an ONNX graph stored in fp16 to f32. IS-Net's file keeps its
//! weights in fp16 and casts its input and some activations to fp16, so
//! ONNX Runtime rounds them to 11 significant bits on the way; tract, which
//! is slow at fp16, converts the whole graph to f32 at load. Running the
//! same f32 graph on both makes the engines agree (the engines test) and
//! costs ONNX Runtime nothing measurable. Subgraphs (If, Loop) are not
//! visited: the models here have none.

use anyhow::{Context, Result};
use half::f16;
use prost::Message;
use tract_onnx::pb::tensor_proto::DataType;
use tract_onnx::pb::type_proto::Value;
use tract_onnx::pb::{ModelProto, TensorProto, ValueInfoProto};

const F16: i32 = DataType::Float16 as i32;
const F32: i32 = DataType::Float as i32;

/// The model in `bytes` with every fp16 tensor, cast and declared type in f32.
pub fn widen_fp16(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut model = ModelProto::decode(bytes).context("parsing the ONNX file")?;
    let graph = model.graph.as_mut().context("the ONNX file has no graph")?;
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
    Ok(model.encode_to_vec())
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

    #[test]
    fn fp16_weights_casts_and_types_become_f32() {
        let weight = TensorProto {
            data_type: F16,
            dims: vec![2],
            // 1.0 and -2.5 in fp16, little-endian
            raw_data: vec![0x00, 0x3c, 0x00, 0xc1],
            ..TensorProto::default()
        };
        let cast = NodeProto {
            op_type: "Cast".into(),
            attribute: vec![AttributeProto {
                name: "to".into(),
                i: i64::from(F16),
                ..AttributeProto::default()
            }],
            ..NodeProto::default()
        };
        let model = ModelProto {
            graph: Some(GraphProto {
                initializer: vec![weight],
                node: vec![cast],
                ..GraphProto::default()
            }),
            ..ModelProto::default()
        };
        let widened = ModelProto::decode(&widen_fp16(&model.encode_to_vec()).unwrap()[..]).unwrap();
        let graph = widened.graph.unwrap();
        assert_eq!(graph.initializer[0].data_type, F32);
        assert_eq!(graph.initializer[0].float_data, [1.0, -2.5]);
        assert!(graph.initializer[0].raw_data.is_empty());
        assert_eq!(graph.node[0].attribute[0].i, i64::from(F32));
    }
}
