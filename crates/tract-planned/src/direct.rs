//! The thin convolutions, run as tract's direct spatial convolution. tract
//! runs a convolution as im2col and a matrix product, a tile of the
//! kernel's rows (output channels) by its columns (output points) at a
//! time; where a tile is nearly all overhead that loses. Two kinds of
//! convolution do: those that sum few values into each output (IS-Net's
//! first, of three channels, 27 values) and those to fewer channels than a
//! tile has rows (the single-channel side outputs of IS-Net and U2Net,
//! which fill one row of 8 or 16). tract's direct convolution runs those
//! two about twice as fast, and every other convolution of these models
//! slower, so it is asked for these alone (BENCHMARKS.md, "Thin
//! convolutions and residual sums"). Its sums run in another order: the outputs differ from
//! im2col's in the last bits.

use super::patch_each;
use tract_core::internal::*;
use tract_core::knobs::KnobScope;
use tract_core::ops::cnn::conv::DirectSpatialConv;
use tract_core::ops::cnn::Conv;

/// Values summed into each output up to which a convolution is thin.
const FEW_VALUES: usize = 64;
/// Output channels below which a convolution is thin.
const FEW_CHANNELS: usize = 4;

/// Puts tract's direct spatial convolution in place of each thin
/// convolution it can run; returns how many.
pub(super) fn plan_direct_convs(model: &mut TypedModel) -> TractResult<usize> {
    KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "false")])?.enter(|| {
        patch_each(model, |model, node| {
            let Some(conv) = node.op_as::<Conv>() else {
                return Ok(None);
            };
            let kernel: usize = conv.pool_spec.kernel_shape.iter().product();
            let thin = conv.input_channels() * kernel <= FEW_VALUES
                || conv.output_channels() < FEW_CHANNELS;
            if !thin {
                return Ok(None);
            }
            // tract's code generation picks the direct convolution where it
            // can run it; any other form is left to its optimiser.
            let direct = conv.codegen(model, node)?.filter(|patch| {
                patch
                    .model
                    .nodes
                    .iter()
                    .any(|node| node.op_is::<DirectSpatialConv>())
            });
            Ok(direct)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{conv_model, tract_and_planned};

    /// A convolution planned by `plan_direct_convs`, and its output next to
    /// the unplanned one's: how many were planned, and the largest
    /// difference relative to the output's largest value.
    fn both(
        input: [usize; 4],
        outputs: usize,
        kernel: [usize; 2],
        strides: [usize; 2],
    ) -> (usize, f32) {
        let model = conv_model(input, outputs, kernel, 1, strides, [1, 1], 1);
        let (tract, direct, planned) = tract_and_planned(model, input, plan_direct_convs);
        assert_eq!(tract.shape(), direct.shape());
        let tract = tract.to_plain_array_view::<f32>().unwrap();
        let direct = direct.to_plain_array_view::<f32>().unwrap();
        let largest = tract.iter().fold(0f32, |max, value| max.max(value.abs()));
        let difference = tract
            .iter()
            .zip(&direct)
            .fold(0f32, |max, (a, b)| max.max((a - b).abs()));
        (planned, difference / largest)
    }

    #[test]
    fn thin_convolutions_run_direct_to_the_same_values() {
        // Rows of 130 outputs: tract runs none under 128 direct. Where it
        // has no direct convolution kernel, nothing is planned.
        let expected = usize::from(tract_linalg::routines::conv_w4_f32().is_some());
        let cases = [
            // IS-Net's first: three channels, stride 2.
            ([1, 3, 6, 260], 64, [3, 3], [2, 2]),
            // A side output: one channel from 64.
            ([1, 64, 4, 130], 1, [3, 3], [1, 1]),
        ];
        for (input, outputs, kernel, strides) in cases {
            let (planned, difference) = both(input, outputs, kernel, strides);
            let label = format!("{input:?} to {outputs}");
            assert_eq!(planned, expected, "{label}");
            assert!(difference < 1e-6, "{label}: {difference}");
        }
    }

    #[test]
    fn a_convolution_of_many_values_to_many_channels_is_left_to_im2col() {
        let (planned, _) = both([1, 8, 4, 130], 16, [3, 3], [1, 1]);
        assert_eq!(planned, 0);
    }
}
