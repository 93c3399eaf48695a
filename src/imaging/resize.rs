//! SIMD resizing (fast_image_resize), antialiased when shrinking: Catmull-Rom
//! (sharp enough for mattes) unless a model's input wants another filter.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, GenericImageView, RgbImage, RgbaImage};

/// A convolution filter, as `models/manifest.toml` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filter {
    #[default]
    CatmullRom,
    Bilinear,
}

fn options(filter: Filter) -> ResizeOptions {
    let filter = match filter {
        Filter::CatmullRom => FilterType::CatmullRom,
        Filter::Bilinear => FilterType::Bilinear,
    };
    ResizeOptions::new().resize_alg(ResizeAlg::Convolution(filter))
}

/// Resizes a decoded image (8-bit RGB or RGBA), keeping its kind.
pub fn resize(src: &DynamicImage, width: u32, height: u32) -> DynamicImage {
    resize_with(src, width, height, Filter::CatmullRom)
}

/// `resize` with another filter.
pub fn resize_with(src: &DynamicImage, width: u32, height: u32, filter: Filter) -> DynamicImage {
    if src.dimensions() == (width, height) {
        return src.clone();
    }
    let (pixel_type, raw) = match src {
        DynamicImage::ImageRgb8(img) => (PixelType::U8x3, img.as_raw()),
        DynamicImage::ImageRgba8(img) => (PixelType::U8x4, img.as_raw()),
        other => {
            let rgba = DynamicImage::ImageRgba8(other.to_rgba8());
            return resize_with(&rgba, width, height, filter);
        }
    };
    let src_ref = ImageRef::new(src.width(), src.height(), raw, pixel_type)
        .expect("an image buffer matches its size");
    let mut dst = Image::new(width, height, pixel_type);
    Resizer::new()
        .resize(&src_ref, &mut dst, &options(filter))
        .expect("same pixel type");
    let pixels = dst.into_vec();
    match pixel_type {
        PixelType::U8x3 => RgbImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgb8),
        _ => RgbaImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgba8),
    }
    .expect("the resizer filled width*height pixels")
}

/// Resizes a one-byte-a-pixel plane.
pub fn resize_gray(src: &[u8], src_size: (u32, u32), size: (u32, u32)) -> Vec<u8> {
    if src_size == size {
        return src.to_vec();
    }
    let src_ref = ImageRef::new(src_size.0, src_size.1, src, PixelType::U8)
        .expect("the plane's length matches its size");
    let mut dst = Image::new(size.0, size.1, PixelType::U8);
    Resizer::new()
        .resize(&src_ref, &mut dst, &options(Filter::CatmullRom))
        .expect("same pixel type");
    dst.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_plane_stays_flat_through_resizing() {
        let out = resize_gray(&[200; 64 * 48], (64, 48), (640, 17));
        assert_eq!(out.len(), 640 * 17);
        assert!(out.iter().all(|&v| v == 200));
    }
}
