//! A scalar operation after a convolution taken into its matrix product.
//! tract fuses an operation with a scalar (a ReLU's `max(x, 0)`) into the
//! matrix product before it, applied to each tile as it leaves the kernel,
//! but a convolution's product is followed by a reshape to the output's
//! shape, and the operation after that is left as an operator of its own:
//! another pass over the whole tensor, on one core. Element-wise with a
//! scalar, it gives the same values before the reshape as after, so
//! `fuse_scalar_ops` moves it there and lets tract fuse it: IS-Net's 99
//! ReLUs took 18 ms of a 1.8 s run, U2NetP's 101 took 6 of 280
//! (BENCHMARKS.md, "ReLUs in the product").

use super::read_once;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::binary::OptBinByScalar;
use tract_onnx::tract_core::ops::change_axes::IntoShape;
use tract_onnx::tract_core::ops::matmul::optimized::OptMatMul;

/// Fuses into its matrix product each operation with a scalar that
/// follows a product's reshape; returns how many.
pub(super) fn fuse_scalar_ops(model: &mut TypedModel) -> TractResult<usize> {
    let mut fused = 0;
    for id in 0..model.nodes.len() {
        let Some((product, patch)) = moved_before_reshape(model, id)? else {
            continue;
        };
        patch.apply(model)?;
        let node = model.node(product);
        if let Some(patch) = node.op.fuse(model, node)? {
            patch.apply(model)?;
            fused += 1;
        }
    }
    Ok(fused)
}

/// For node `id`, an operation with a scalar on a reshaped matrix product
/// that nothing else reads: the product's node, and a patch that applies
/// the operation before the reshape.
fn moved_before_reshape(
    model: &TypedModel,
    id: usize,
) -> TractResult<Option<(usize, TypedModelPatch)>> {
    let node = model.node(id);
    if !node.op_is::<OptBinByScalar>() || node.inputs.len() != 2 {
        return Ok(None);
    }
    let [reshaped, scalar] = [node.inputs[0], node.inputs[1]];
    let reshape = model.node(reshaped.node);
    if !reshape.op_is::<IntoShape>() || !read_once(model, reshaped)? {
        return Ok(None);
    }
    let product = reshape.inputs[0];
    if !model.node(product.node).op_is::<OptMatMul>()
        || !read_once(model, product)?
        || model.outlet_fact(scalar)?.shape.volume() != 1.to_dim()
    {
        return Ok(None);
    }
    let mut patch = TypedModelPatch::default();
    let taps = [
        patch.tap_model(model, product)?,
        patch.tap_model(model, scalar)?,
    ];
    let applied = patch.wire_node(
        format!("{}.before-reshape", node.name),
        node.op.clone(),
        &taps,
    )?;
    let moved = patch.wire_node(
        format!("{}.after", reshape.name),
        reshape.op.clone(),
        &applied,
    )?;
    patch.shunt_outside(model, id.into(), moved[0])?;
    Ok(Some((product.node, patch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tract::{assert_same_bits, tract_and_planned, wire_conv};
    use tract_onnx::tract_core::knobs::KnobScope;
    use tract_onnx::tract_core::ops::math;

    /// A convolution, then `max` with the scalar `floor`, then `read_twice`
    /// (the convolution's output read by a second node too): tract's plan
    /// and the fused; how many were fused and how many scalar operators
    /// are left.
    fn both(floor: f32, read_twice: bool) -> (Tensor, Tensor, usize, usize) {
        let input = [1, 3, 6, 20];
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(input)).unwrap();
        let conv = wire_conv(&mut model, x, 5, [3, 3], 1, [1, 1], [1, 1], 1);
        let floor = model.add_const("floor", tensor4(&[[[[floor]]]])).unwrap();
        let relu = model
            .wire_node("relu", math::max(), &[conv, floor])
            .unwrap()[0];
        let mut outputs = vec![relu];
        if read_twice {
            outputs.push(
                model
                    .wire_node("twice", math::add(), &[conv, conv])
                    .unwrap()[0],
            );
        }
        model.select_output_outlets(&outputs).unwrap();
        let optimised = KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "true")])
            .unwrap()
            .enter(|| model.into_optimized())
            .unwrap();
        let scalar_ops = |model: &TypedModel| {
            model
                .eval_order()
                .unwrap()
                .into_iter()
                .filter(|&id| model.node(id).op_is::<OptBinByScalar>())
                .count()
        };
        assert_eq!(scalar_ops(&optimised), 1, "tract fuses the ReLU itself now");
        let left = std::cell::Cell::new(0);
        let (tract, fused, count) = tract_and_planned(optimised, input, |model| {
            let fused = fuse_scalar_ops(model)?;
            left.set(scalar_ops(model));
            Ok(fused)
        });
        (tract, fused, count, left.get())
    }

    #[test]
    fn a_relu_after_a_convolution_is_fused_into_its_product() {
        for floor in [0.0, 3.5] {
            let (tract, fused, count, left) = both(floor, false);
            assert_eq!((count, left), (1, 0), "max with {floor}");
            assert_same_bits(&tract, &fused, &format!("max with {floor}"));
        }
    }

    #[test]
    fn a_product_read_by_another_node_too_is_left() {
        let (tract, fused, count, left) = both(0.0, true);
        assert_eq!((count, left), (0, 1));
        assert_same_bits(&tract, &fused, "read twice");
    }
}
