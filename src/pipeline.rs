//! One cut-out, start to finish: decode, size, run the model, put the matte
//! in the alpha channel, encode. The API and `cutout remove` share it.

use crate::domain::SizeMode;
use crate::engine::preprocess::{input_size, matte_from_output, to_tensor};
use crate::engine::{InferError, Inference, ModelSpec};
use crate::error::ApiError;
use crate::imaging::{self, DecodeError, GeometryError};

pub struct CutOut {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
}

pub struct Pipeline {
    pub spec: ModelSpec,
    pub inference: Inference,
}

impl Pipeline {
    pub fn cut_out(&self, bytes: &[u8], size: SizeMode) -> Result<CutOut, ApiError> {
        let original = imaging::decode(bytes).map_err(|e| match e {
            DecodeError::Unsupported => ApiError::UnsupportedImageFormat,
            DecodeError::TooLarge { width, height } => ApiError::ImageTooLarge { width, height },
            DecodeError::Invalid(why) => ApiError::InvalidImage(why),
        })?;
        let (w, h) = original.dimensions();
        let (out_w, out_h) = imaging::output_size(w, h, size).map_err(|e| match e {
            GeometryError::ResolutionTooHigh => ApiError::ResolutionTooHigh {
                width: w,
                height: h,
            },
        })?;

        let (in_w, in_h) = input_size(self.spec.input, w, h);
        let model_input = imaging::resize_rgba(&original, in_w, in_h);
        let tensor = to_tensor(&model_input, &self.spec.normalise);
        drop(model_input);
        let output = self
            .inference
            .run(tensor, in_w, in_h)
            .map_err(|e| match e {
                InferError::Loading | InferError::QueueFull | InferError::Failed(_) => {
                    ApiError::Unavailable(e.to_string())
                }
                InferError::Run(cause) => ApiError::Internal(cause),
            })?;
        let matte = matte_from_output(&output, self.spec.output);
        let matte = imaging::resize_gray(&matte, (in_w, in_h), (out_w, out_h));

        let mut cut = if (out_w, out_h) == (w, h) {
            original
        } else {
            imaging::resize_rgba(&original, out_w, out_h)
        };
        imaging::apply_matte(&mut cut, &matte);
        let png = imaging::encode_png(&cut).map_err(|e| ApiError::Internal(e.into()))?;
        Ok(CutOut {
            png,
            width: out_w,
            height: out_h,
        })
    }
}
