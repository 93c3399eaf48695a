//! A convolution over so many input channels that its matrix product is
//! slow, split along them into convolutions whose outputs are summed.
//! tract's product walks the whole of `K` (input channels × kernel taps)
//! for each panel of output columns, and a panel of `K` = 32,000 (768 KiB)
//! no longer stays in a core's cache beside the kernel's rows: MODNet's
//! 5 × 5 convolution over 1280 channels ran at 126 GFLOP/s, in four parts
//! of `K` = 8000 at 190 (BENCHMARKS.md, "A deep convolution split"). The
//! sums come in another order, so the values differ from tract's in the
//! last bits.

use super::patch_each;
use tract_core::internal::*;
use tract_core::ops::array::Slice;
use tract_core::ops::cnn::{Conv, KernelFormat};
use tract_core::ops::math::add;
use tract_core::ops::nn::DataFormat;

/// The largest `K` left whole, and about the most each part gets.
const MAX_K: usize = 8192;

/// Splits each ungrouped f32 NCHW convolution with a constant OIHW kernel
/// and a `K` over `MAX_K` into as few parts of equal channels as bring
/// each part's `K` to about `MAX_K` (over it by less than one channel's
/// taps); returns how many convolutions it split.
pub(super) fn split_deep_convs(model: &mut TypedModel) -> TractResult<usize> {
    patch_each(model, split_conv)
}

fn split_conv(model: &TypedModel, node: &TypedNode) -> TractResult<Option<TypedModelPatch>> {
    let Some(conv) = node.op_as::<Conv>() else {
        return Ok(None);
    };
    let spec = &conv.pool_spec;
    let input = model.outlet_fact(node.inputs[0])?;
    let Some(kernel) = model.outlet_fact(node.inputs[1])?.konst.clone() else {
        return Ok(None);
    };
    let channels = conv.input_channels();
    let k = channels * spec.kernel_shape.iter().product::<usize>();
    if k <= MAX_K
        || conv.group != 1
        || conv.q_params.is_some()
        || conv.kernel_fmt != KernelFormat::OIHW
        || spec.data_format != DataFormat::NCHW
        || input.datum_type != f32::datum_type()
        || kernel.datum_type() != f32::datum_type()
        || kernel.rank() != 4
        || kernel.shape()[1] != channels
    {
        return Ok(None);
    }
    let per_part = channels.div_ceil(k.div_ceil(MAX_K));
    let mut patch = TypedModelPatch::default();
    let x = patch.tap_model(model, node.inputs[0])?;
    let bias = patch.tap_model(model, node.inputs[2])?;
    // What tract wires for a convolution that has none.
    let no_bias = Tensor::zero_scalar_dt(model.outlet_fact(node.inputs[2])?.datum_type)?;
    let no_bias = patch.add_const(format!("{}.no_bias", node.name), no_bias)?;
    let mut sum = None;
    for (part, start) in (0..channels).step_by(per_part).enumerate() {
        let end = (start + per_part).min(channels);
        let name = format!("{}.part{part}", node.name);
        let slice = patch.wire_node(format!("{name}.input"), Slice::new(1, start, end), &[x])?;
        let weights = patch.add_const(format!("{name}.kernel"), kernel.slice(1, start, end)?)?;
        let mut piece = conv.clone();
        piece.pool_spec.input_channels = end - start;
        // The bias is added once, by the first part.
        let bias = if part == 0 { bias } else { no_bias };
        let out = patch.wire_node(&name, piece, &[slice[0], weights, bias])?[0];
        sum = Some(match sum {
            None => out,
            Some(sum) => patch.wire_node(format!("{name}.sum"), add(), &[sum, out])?[0],
        });
    }
    let sum = sum.context("a convolution of no channels")?;
    patch.shunt_outside(model, node.id.into(), sum)?;
    Ok(Some(patch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{conv_model, tract_and_planned};

    /// A convolution of 5 channels out over `input` with a `kernel`,
    /// padding 1 and `stride`, as tract runs it and split; and how many
    /// convolutions the split model has.
    fn both(
        input: [usize; 4],
        kernel: usize,
        stride: usize,
        group: usize,
    ) -> (Tensor, Tensor, usize) {
        let model = conv_model(input, 5, [kernel; 2], 1, [stride; 2], [1, 1], group);
        let mut convs = 0;
        let (tract, split, _) = tract_and_planned(model, input, |model| {
            let split = split_deep_convs(model)?;
            // The convolution split is still a node, read by nothing.
            let running = model.eval_order()?;
            convs = running
                .iter()
                .filter(|&&id| model.nodes[id].op_is::<Conv>())
                .count();
            Ok(split)
        });
        (tract, split, convs)
    }

    #[test]
    fn a_deep_convolution_is_split_and_sums_to_tracts_values() {
        // K = 1900 × 9 = 17,100: three parts of 634, 634 and 632 channels.
        for (input, stride) in [([1, 1900, 4, 5], 1), ([1, 1900, 7, 6], 2)] {
            let (tract, split, convs) = both(input, 3, stride, 1);
            assert_eq!(convs, 3, "{input:?}");
            assert_eq!(tract.shape(), split.shape(), "{input:?}");
            let tract = tract.to_plain_array_view::<f32>().unwrap();
            let split = split.to_plain_array_view::<f32>().unwrap();
            let largest = tract.iter().fold(0f32, |max, v| max.max(v.abs()));
            let differ = tract
                .iter()
                .zip(split)
                .fold(0f32, |max, (a, b)| max.max((a - b).abs()));
            // Sums of 17,100 terms of up to 5 in another order; a bias
            // added by more than one part would be 2.5 or more off.
            assert!(
                largest > 10.0 && differ < 1e-3,
                "{input:?}: {differ} of {largest}"
            );
        }
    }

    #[test]
    fn a_shallow_or_grouped_convolution_is_left_whole() {
        // K = 2048 × 2 × 2 = 8192, the most left whole.
        let (tract, split, convs) = both([1, 2048, 3, 3], 2, 1, 1);
        assert_eq!((convs, &tract), (1, &split));
        let (tract, split, convs) = both([1, 4000, 3, 3], 3, 1, 5);
        assert_eq!((convs, &tract), (1, &split));
    }
}
