//! How far IS-Net's matte through tract's f16 plan is from cutout's f32
//! plan, on this CPU: the check behind BENCHMARKS.md, "fp16 on the A76".
//!
//!     f16_matte models/isnet.tract.onnx photo.ppm
//!
//! `photo.ppm`: a binary (P6) square photo at the size to run, a multiple
//! of 32. The f16 plan keeps the file's fp16 weights and runs every
//! operator in f16 on tract's own kernels (native where the CPU has fp16
//! arithmetic, as the Cortex-A76); the f32 plan is cutout's (weights cast
//! once, tract-planned's operators).
use tract_core::floats::FloatPrecisionTranslator;
use tract_core::internal::*;
use tract_onnx::prelude::*;

fn main() -> TractResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, photo] = args.as_slice() else {
        bail!("usage: f16_matte MODEL.onnx PHOTO.ppm");
    };
    let ppm = std::fs::read(photo)?;
    let (size, rgb) = square_ppm(&ppm)?;
    // IS-Net's normalisation (models/manifest.toml): RGB/255 - 0.5, planar.
    let plane = size * size;
    let input: Vec<f32> = (0..3 * plane)
        .map(|i| rgb[(i % plane) * 3 + i / plane] as f32 / 255.0 - 0.5)
        .collect();
    let input = Tensor::from_shape(&[1, 3, size, size], &input)?;
    let mut loaded = tract_onnx::onnx().model_for_path(model)?;
    let first = loaded.output_outlets()?[0];
    loaded.select_output_outlets(&[first])?;
    let typed = loaded
        .with_input_fact(0, f32::fact([1, 3, size, size]).into())?
        .into_typed()?
        .into_decluttered()?;

    let mut f32_model = typed.clone();
    tract_planned::to_f32(&mut f32_model)?;
    let f32_plan = tract_planned::optimise(f32_model)?.0.into_runnable()?;
    let f32_matte = f32_plan.run(tvec!(input.clone().into()))?[0].clone();

    let mut f16_model = typed;
    f16_model.transform(&FloatPrecisionTranslator::new(
        DatumType::F32,
        DatumType::F16,
    ))?;
    let f16_plan = f16_model.into_optimized()?.into_runnable()?;
    let f16_input = input.cast_to::<f16>()?.into_owned();
    let f16_matte = f16_plan.run(tvec!(f16_input.into()))?[0]
        .cast_to::<f32>()?
        .into_owned();

    let (a, b) = (
        f32_matte.to_plain_array_view::<f32>()?,
        f16_matte.to_plain_array_view::<f32>()?,
    );
    let apart: Vec<f32> = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).collect();
    let n = apart.len() as f32;
    let over_one_step = apart.iter().filter(|&&d| d > 1.0 / 255.0).count() as f32 / n;
    let (mut both, mut either) = (0usize, 0usize);
    for (x, y) in a.iter().zip(b.iter()) {
        both += (*x >= 0.5 && *y >= 0.5) as usize;
        either += (*x >= 0.5 || *y >= 0.5) as usize;
    }
    println!(
        "{size}²: f16 against f32 at most {:.2}/255, {:.3}/255 on average, over 1/255 at {:.2}% \
         of pixels; silhouettes (0.5) IoU {:.4}",
        apart.iter().fold(0f32, |m, &d| m.max(d)) * 255.0,
        apart.iter().sum::<f32>() / n * 255.0,
        over_one_step * 100.0,
        both as f32 / either.max(1) as f32,
    );
    Ok(())
}

/// A binary PPM's side and its RGB bytes, where it is square.
fn square_ppm(bytes: &[u8]) -> TractResult<(usize, &[u8])> {
    let mut fields = Vec::new();
    let mut at = 0;
    // "P6", width, height, maxval, each after whitespace; then one byte of it.
    while fields.len() < 4 {
        while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        let start = at;
        while bytes.get(at).is_some_and(|b| !b.is_ascii_whitespace()) {
            at += 1;
        }
        fields.push(std::str::from_utf8(&bytes[start..at])?);
    }
    let [magic, width, height, max] = fields[..] else {
        unreachable!()
    };
    let (width, height): (usize, usize) = (width.parse()?, height.parse()?);
    ensure!(magic == "P6" && max == "255", "not a binary 8-bit PPM");
    ensure!(width == height, "the photo must be square");
    let rgb = bytes
        .get(at + 1..at + 1 + 3 * width * height)
        .context("a short PPM")?;
    Ok((width, rgb))
}
