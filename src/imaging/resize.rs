//! SIMD resizing (fast_image_resize), antialiased when shrinking: Catmull-Rom
//! (sharp enough for mattes) unless a model's input wants another filter.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, GenericImageView, RgbImage, RgbaImage};
use rayon::prelude::*;

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
    let pixels = resize_in_bands(&src_ref, (width, height), filter);
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
    resize_in_bands(&src_ref, size, Filter::CatmullRom)
}

/// Resizes `src` to `size`, bands of rows at a time on every core.
fn resize_in_bands(src: &ImageRef, size: (u32, u32), filter: Filter) -> Vec<u8> {
    let (width, height) = size;
    let bytes_a_pixel = src.pixel_type().size();
    let mut out = vec![0u8; width as usize * height as usize * bytes_a_pixel];
    if out.is_empty() {
        return out;
    }
    let band_rows = super::band_rows(height);
    let band_bytes = band_rows as usize * width as usize * bytes_a_pixel;
    out.par_chunks_mut(band_bytes)
        .enumerate()
        .for_each(|(i, band)| resize_band(src, size, filter, i as u32 * band_rows, band));
    out
}

/// The rows of `src` resized to `size` that start at `first_row` and fill
/// `band`. The band crops the source to the rows it maps to; the filter
/// still reads past the crop (up to the image's edges), so bands join
/// without seams.
fn resize_band(src: &ImageRef, size: (u32, u32), filter: Filter, first_row: u32, band: &mut [u8]) {
    let width = size.0;
    let rows = (band.len() / (width as usize * src.pixel_type().size())) as u32;
    let source_rows_a_row = f64::from(src.height()) / f64::from(size.1);
    let top = f64::from(first_row) * source_rows_a_row;
    // min: rounding must not take the last band past the image.
    let tall = (f64::from(rows) * source_rows_a_row).min(f64::from(src.height()) - top);
    let options = options(filter).crop(0.0, top, f64::from(src.width()), tall);
    let mut dst =
        Image::from_slice_u8(width, rows, band, src.pixel_type()).expect("a band holds its rows");
    Resizer::new()
        .resize(src, &mut dst, &options)
        .expect("same pixel type");
}

/// Rows `first_row..` of a one-byte-a-pixel plane resized to `size`, as
/// many as fill `band`: `resize_gray` a band at a time.
pub fn resize_gray_band(
    src: &[u8],
    src_size: (u32, u32),
    size: (u32, u32),
    first_row: u32,
    band: &mut [u8],
) {
    if src_size == size {
        let start = first_row as usize * size.0 as usize;
        band.copy_from_slice(&src[start..start + band.len()]);
        return;
    }
    let src_ref = ImageRef::new(src_size.0, src_size.1, src, PixelType::U8)
        .expect("the plane's length matches its size");
    resize_band(&src_ref, size, Filter::CatmullRom, first_row, band);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole resize in one go, as fast_image_resize does it.
    fn in_one_band(src: &ImageRef, size: (u32, u32), filter: Filter) -> Vec<u8> {
        let mut dst = Image::new(size.0, size.1, src.pixel_type());
        Resizer::new()
            .resize(src, &mut dst, &options(filter))
            .unwrap();
        dst.into_vec()
    }

    #[test]
    fn bands_resize_as_one_pass_does() {
        let plane: Vec<u8> = (0..97u32 * 61).map(|i| (i * 7919 % 251) as u8).collect();
        let rgb: Vec<u8> = (0..97u32 * 61 * 3)
            .map(|i| (i * 104729 % 253) as u8)
            .collect();
        for size in [(300, 211), (40, 17), (97, 500), (13, 1)] {
            let kinds = [(&plane, PixelType::U8), (&rgb, PixelType::U8x3)];
            let filters = [Filter::CatmullRom, Filter::Bilinear];
            for ((src, kind), filter) in kinds.iter().flat_map(|k| filters.map(|f| (*k, f))) {
                let src = ImageRef::new(97, 61, src, kind).unwrap();
                let banded = resize_in_bands(&src, size, filter);
                let whole = in_one_band(&src, size, filter);
                let worst = banded.iter().zip(&whole).map(|(a, b)| a.abs_diff(*b)).max();
                assert!(
                    worst <= Some(1),
                    "{size:?} {kind:?} {filter:?}: off by {worst:?}"
                );
            }
        }
    }

    #[test]
    fn a_band_of_a_plane_is_its_rows_of_the_whole_resize() {
        let plane: Vec<u8> = (0..50u32 * 30).map(|i| (i * 7919 % 251) as u8).collect();
        for size in [(50, 30), (170, 90)] {
            let src = ImageRef::new(50, 30, &plane, PixelType::U8).unwrap();
            let whole = in_one_band(&src, size, Filter::CatmullRom);
            let width = size.0 as usize;
            let mut band = vec![0; 9 * width];
            resize_gray_band(&plane, (50, 30), size, 20, &mut band);
            let rows = &whole[20 * width..29 * width];
            let worst = band.iter().zip(rows).map(|(a, b)| a.abs_diff(*b)).max();
            assert!(worst <= Some(1), "{size:?}: off by {worst:?}");
        }
    }

    #[test]
    fn a_flat_plane_stays_flat_through_resizing() {
        let out = resize_gray(&[200; 64 * 48], (64, 48), (640, 17));
        assert_eq!(out.len(), 640 * 17);
        assert!(out.iter().all(|&v| v == 200));
    }
}
