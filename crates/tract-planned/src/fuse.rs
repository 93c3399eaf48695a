//! The operations after a convolution taken into its matrix product. tract
//! fuses an operation with a scalar (a ReLU's `max(x, 0)`), and a sum with
//! a tensor of the product's shape, into the matrix product before it,
//! applied to each tile as it leaves the kernel; but a convolution's
//! product is followed by a reshape to the output's shape, and what comes
//! after that is left as operators of their own: another pass over the
//! whole tensor, on one core. Element-wise, they give the same values on
//! either side of the reshape, so `fuse_after_convs` moves an operation
//! with a scalar before it for tract to fuse, and takes a sum with a tensor
//! of the output's shape into the product itself, reading the tensor with
//! the product's strides. IS-Net's 99 ReLUs took 18 ms of a 1.8 s run,
//! U2NetP's 101 took 6 of 280 (BENCHMARKS.md, "ReLUs in the product");
//! their ReLU-then-residual sums, which tract joins into one chain
//! operator, 18 and 6.5 ms more (BENCHMARKS.md, "Residual sums").

use super::read_once;
use tract_core::internal::*;
use tract_core::ops::binary::{OptBinByScalar, OptBinChain, OptBinUnicast, TypedBinOp};
use tract_core::ops::change_axes::IntoShape;
use tract_core::ops::math::Add;
use tract_core::ops::matmul::optimized::{MapOutputAxisToInput, OptMatMul, ProtoFusedSpec};
use tract_linalg::mmm::OutputStoreSpec;

/// Fuses into its matrix product each operation with a scalar, and each
/// sum with a tensor of the output's shape, that follows a product's
/// reshape, chains of them included; returns how many were taken in (or,
/// an operation tract would not fuse, moved before the reshape).
pub(super) fn fuse_after_convs(model: &mut TypedModel) -> TractResult<usize> {
    let mut fused = 0;
    for id in 0..model.nodes.len() {
        let mut next = match model.node(id).op_as::<OptBinChain>() {
            Some(chain) => split_chain(model, id, chain.clone())?,
            None => Some(id),
        };
        while let Some(id) = next {
            let after = match fused_with_scalar(model, id)? {
                Some(after) => Some(after),
                None => fused_sum(model, id)?,
            };
            let Some(after) = after else {
                break;
            };
            fused += 1;
            next = after;
        }
    }
    Ok(fused)
}

/// The reshaped matrix product node `id` reads as its input `slot`, where
/// nothing else reads the product or its reshape: the product's and the
/// reshape's nodes.
fn reshaped_product(model: &TypedModel, id: usize, slot: usize) -> TractResult<Option<[usize; 2]>> {
    let Some(&reshaped) = model.node(id).inputs.get(slot) else {
        return Ok(None);
    };
    let reshape = model.node(reshaped.node);
    if !reshape.op_is::<IntoShape>() || !read_once(model, reshaped)? {
        return Ok(None);
    }
    let product = reshape.inputs[0];
    if !model.node(product.node).op_is::<OptMatMul>() || !read_once(model, product)? {
        return Ok(None);
    }
    Ok(Some([product.node, reshape.id]))
}

/// Wires the reshape `reshape` after `wire` in `patch`, in place of node
/// `id`'s output, and applies the patch; returns the node after the new
/// reshape, where one alone reads it.
fn apply_reshaped(
    model: &mut TypedModel,
    mut patch: TypedModelPatch,
    id: usize,
    reshape: usize,
    wire: OutletId,
) -> TractResult<Option<usize>> {
    let reshape = model.node(reshape);
    let name = format!("{}.after", reshape.name);
    let reshaped = patch.wire_node(&name, reshape.op.clone(), &[wire])?;
    patch.shunt_outside(model, id.into(), reshaped[0])?;
    patch.apply(model)?;
    let after = &model.node_by_name(&name)?.outputs[0].successors;
    Ok((after.len() == 1).then(|| after[0].node))
}

/// Node `id` as tract's generic operators, one per step of its chain,
/// where the chain reads a reshaped product: the first one's node.
fn split_chain(
    model: &mut TypedModel,
    id: usize,
    chain: OptBinChain,
) -> TractResult<Option<usize>> {
    if reshaped_product(model, id, 0)?.is_none() {
        return Ok(None);
    }
    let node = model.node(id);
    let mut patch = TypedModelPatch::default();
    let mut wire = patch.tap_model(model, node.inputs[0])?;
    let first = format!("{}.step-0", node.name);
    for (index, (step, &operand)) in chain.steps.iter().zip(&node.inputs[1..]).enumerate() {
        let operand = patch.tap_model(model, operand)?;
        let op = TypedBinOp(step.binop.clone(), None);
        wire = patch.wire_node(format!("{}.step-{index}", node.name), op, &[wire, operand])?[0];
    }
    patch.shunt_outside(model, id.into(), wire)?;
    patch.apply(model)?;
    Ok(Some(model.node_id_by_name(&first)?))
}

/// Node `id`, an operation with a scalar on a reshaped product, moved
/// before the reshape and fused into the product by tract: Some(the node
/// after the reshape), or Some(None) where tract would not fuse it.
fn fused_with_scalar(model: &mut TypedModel, id: usize) -> TractResult<Option<Option<usize>>> {
    let node = model.node(id);
    let with_scalar = (node.op_is::<OptBinByScalar>() || node.op_is::<TypedBinOp>())
        && node.inputs.len() == 2
        && model.outlet_fact(node.inputs[1])?.shape.volume() == 1.to_dim();
    let Some([product, reshape]) = reshaped_product(model, id, 0)?.filter(|_| with_scalar) else {
        return Ok(None);
    };
    let mut patch = TypedModelPatch::default();
    let taps = [
        patch.tap_model(model, product.into())?,
        patch.tap_model(model, node.inputs[1])?,
    ];
    let name = format!("{}.before-reshape", node.name);
    let applied = patch.wire_node(name, node.op.clone(), &taps)?[0];
    let after = apply_reshaped(model, patch, id, reshape, applied)?;
    // Where tract does not fuse it, it stays before the reshape: the same
    // values, and nothing more to fuse after it.
    let product_node = model.node(product);
    let Some(fusion) = product_node.op.fuse(model, product_node)? else {
        return Ok(Some(None));
    };
    fusion.apply(model)?;
    Ok(Some(after))
}

/// Node `id`, a sum of a reshaped product and a tensor of the sum's shape,
/// taken into the product: the tensor is added to each tile as it leaves
/// the kernel, read with the product's strides (a reshape moves no value).
/// Some(the node after the reshape) where it was.
fn fused_sum(model: &mut TypedModel, id: usize) -> TractResult<Option<Option<usize>>> {
    let node = model.node(id);
    let is_sum = node
        .op_as::<OptBinUnicast>()
        .map(|op| &op.binop)
        .or(node.op_as::<TypedBinOp>().map(|op| &op.0))
        .is_some_and(|binop| binop.is::<Add>());
    if !is_sum || node.inputs.len() != 2 {
        return Ok(None);
    }
    let mut found = None;
    for slot in 0..2 {
        if let Some(nodes) = reshaped_product(model, id, slot)? {
            found = Some((slot, nodes));
            break;
        }
    }
    let Some((slot, [product, reshape])) = found else {
        return Ok(None);
    };
    let operand = node.inputs[1 - slot];
    let output = model.outlet_fact(id.into())?;
    let product_node = model.node(product);
    let op = product_node.op_as::<OptMatMul>().unwrap();
    let c_shape = op.c_fact.shape.as_concrete().map(|shape| shape.to_vec());
    let (Some(c_shape), Some(m), Some(n)) = (c_shape, op.c_m_axis, op.c_n_axis) else {
        return Ok(None);
    };
    let operand_fact = model.outlet_fact(operand)?;
    let into = model.node(reshape).op_as::<IntoShape>().unwrap();
    let batched = c_shape
        .iter()
        .enumerate()
        .any(|(axis, &dim)| axis != m && axis != n && dim != 1);
    if op.mmm.len() != 1
        || batched
        || operand_fact.shape != output.shape
        || operand_fact.datum_type != op.c_fact.datum_type
        || into.strides != Tensor::natural_strides(&into.dims)
    {
        return Ok(None);
    }
    let strides = Tensor::natural_strides(&c_shape);
    let size = op.c_fact.datum_type.size_of() as isize;
    let store = OutputStoreSpec::Strides {
        row_byte_stride: strides[m] * size,
        col_byte_stride: strides[n] * size,
        mr: op.mmm[0].mr(),
        nr: op.mmm[0].nr(),
    };
    let mut summed = op.clone();
    let add = ProtoFusedSpec::AddUnicast(
        store,
        product_node.inputs.len(),
        MapOutputAxisToInput(tvec![]),
    );
    summed.micro_ops.insert(summed.micro_ops.len() - 1, add);
    let mut patch = TypedModelPatch::default();
    let mut inputs = patch.taps(model, &product_node.inputs)?;
    inputs.push(patch.tap_model(model, operand)?);
    let wire = patch.wire_node(format!("{}.summed", product_node.name), summed, &inputs)?[0];
    Ok(Some(apply_reshaped(model, patch, id, reshape, wire)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{assert_same_bits, tract_and_planned, wire_conv};
    use tract_core::knobs::KnobScope;
    use tract_core::ops::math;

    /// The element-wise operators in `model`'s plan.
    fn element_wise(model: &TypedModel) -> usize {
        let ops = model.eval_order().unwrap().into_iter();
        ops.filter(|&id| {
            let node = model.node(id);
            node.op_is::<OptBinByScalar>()
                || node.op_is::<OptBinUnicast>()
                || node.op_is::<OptBinChain>()
                || node.op_is::<TypedBinOp>()
        })
        .count()
    }

    /// A convolution of `x` into 5 channels, then what `after` wires after
    /// it: tract's plan and the fused, how many were fused, and how many
    /// element-wise operators there were before and are left after.
    fn both(
        after: impl FnOnce(&mut TypedModel, OutletId, OutletId) -> Vec<OutletId>,
    ) -> (Tensor, Tensor, usize, [usize; 2]) {
        let input = [1, 3, 6, 20];
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(input)).unwrap();
        let conv = wire_conv(&mut model, x, 5, [3, 3], 1, [1, 1], [1, 1], 1);
        let outputs = after(&mut model, conv, x);
        model.select_output_outlets(&outputs).unwrap();
        let optimised = KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "true")])
            .unwrap()
            .enter(|| model.into_optimized())
            .unwrap();
        let before = element_wise(&optimised);
        let left = std::cell::Cell::new(0);
        let (tract, fused, count) = tract_and_planned(optimised, input, |model| {
            let fused = fuse_after_convs(model)?;
            left.set(element_wise(model));
            Ok(fused)
        });
        (tract, fused, count, [before, left.get()])
    }

    fn relu(model: &mut TypedModel, wire: OutletId, floor: f32) -> OutletId {
        let floor = model.add_const("floor", tensor4(&[[[[floor]]]])).unwrap();
        model
            .wire_node("relu", math::max(), &[wire, floor])
            .unwrap()[0]
    }

    #[test]
    fn a_relu_after_a_convolution_is_fused_into_its_product() {
        for floor in [0.0, 3.5] {
            let (tract, fused, count, ops) = both(|model, conv, _| vec![relu(model, conv, floor)]);
            assert_eq!((count, ops), (1, [1, 0]), "max with {floor}");
            assert_same_bits(&tract, &fused, &format!("max with {floor}"));
        }
    }

    #[test]
    fn a_relu_then_a_residual_sum_are_fused_into_the_product() {
        let (tract, fused, count, ops) = both(|model, conv, x| {
            let relu = relu(model, conv, 0.0);
            // Another convolution: tract would merge a second alike.
            let residual = wire_conv(model, x, 5, [1, 1], 0, [1, 1], [1, 1], 1);
            vec![
                model
                    .wire_node("sum", math::add(), &[relu, residual])
                    .unwrap()[0],
            ]
        });
        // tract joins the two into one chain operator.
        assert_eq!((count, ops), (2, [1, 0]));
        assert_same_bits(&tract, &fused, "relu and residual");
    }

    #[test]
    fn a_sum_with_a_tensor_of_another_shape_is_left() {
        let (tract, fused, count, ops) = both(|model, conv, _| {
            let relu = relu(model, conv, 0.0);
            let per_channel: Vec<f32> = (0..5).map(|c| c as f32 - 2.0).collect();
            let per_channel = Tensor::from_shape(&[1, 5, 1, 1], &per_channel).unwrap();
            let per_channel = model.add_const("per-channel", per_channel).unwrap();
            vec![
                model
                    .wire_node("sum", math::add(), &[relu, per_channel])
                    .unwrap()[0],
            ]
        });
        assert_eq!((count, ops[1]), (1, 1), "the relu alone is fused");
        assert_same_bits(&tract, &fused, "per-channel sum");
    }

    #[test]
    fn a_product_read_by_another_node_too_is_left() {
        let (tract, fused, count, ops) = both(|model, conv, _| {
            let twice = model.wire_node("twice", math::add(), &[conv, conv]);
            vec![relu(model, conv, 0.0), twice.unwrap()[0]]
        });
        assert_eq!((count, ops), (0, [2, 2]));
        assert_same_bits(&tract, &fused, "read twice");
    }
}
