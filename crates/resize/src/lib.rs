//! SIMD resizing (fast_image_resize), antialiased when shrinking: Catmull-Rom
//! (sharp enough for mattes) unless a model's input wants another filter.
//!
//! A crate of its own so that fast_image_resize's generic code, which is
//! made in the crate that calls it, is built once per target, optimised, and
//! not again in each build of cutout and of its unit tests (where it was
//! over half of their build time at the tests' opt-level 1).

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{
    pixels, FilterType, IntoImageView, IntoImageViewMut, PixelTrait, PixelType, ResizeAlg,
    ResizeOptions, Resizer,
};
use image::{DynamicImage, GenericImageView, RgbImage, RgbaImage};
use rayon::prelude::*;
use std::ops::Range;

/// A convolution filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
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
    let band_rows = band_rows(height);
    let band_bytes = band_rows as usize * width as usize * bytes_a_pixel;
    out.par_chunks_mut(band_bytes)
        .enumerate()
        .for_each(|(i, band)| resize_band(src, size, filter, i as u32 * band_rows, 0..width, band));
    out
}

/// The pixels of `src` resized to `size` in `columns` of the rows that
/// start at `first_row`, as many rows as fill `band`. The band crops the
/// source to what it maps to; the filter still reads past the crop (up to
/// the image's edges), so bands join without seams.
fn resize_band(
    src: &ImageRef,
    size: (u32, u32),
    filter: Filter,
    first_row: u32,
    columns: Range<u32>,
    band: &mut [u8],
) {
    let width = columns.len() as u32;
    let rows = (band.len() / (width as usize * src.pixel_type().size())) as u32;
    let source_a_column = f64::from(src.width()) / f64::from(size.0);
    let source_a_row = f64::from(src.height()) / f64::from(size.1);
    let left = f64::from(columns.start) * source_a_column;
    let top = f64::from(first_row) * source_a_row;
    // min: rounding must not take the last band past the image.
    let wide = (f64::from(width) * source_a_column).min(f64::from(src.width()) - left);
    let tall = (f64::from(rows) * source_a_row).min(f64::from(src.height()) - top);
    // The resizer is handed only the source rows the filter reads for the
    // band: with alpha it premultiplies a copy of all it is handed, which
    // for the whole of a 50 MP photo was 200 MB on every core.
    let reach = filter_reach(filter) * source_a_row.max(1.0) + 2.0;
    let first = (top - reach).floor().max(0.0) as u32;
    let last = ((top + tall + reach).ceil() as u32).min(src.height());
    let row_bytes = src.width() as usize * src.pixel_type().size();
    let rows_read = &src.buffer()[first as usize * row_bytes..last as usize * row_bytes];
    let read = ImageRef::new(src.width(), last - first, rows_read, src.pixel_type())
        .expect("whole rows of the source");
    let options = options(filter).crop(left, top - f64::from(first), wide, tall);
    let mut dst =
        Image::from_slice_u8(width, rows, band, src.pixel_type()).expect("a band holds its rows");
    resize_pixels(&read, &mut dst, &options);
}

/// fast_image_resize's resize of `src` into `dst`, for the pixel kinds
/// made here (one byte a pixel, RGB, RGBA): its `Resizer::resize` makes its
/// code for all thirteen kinds it knows, over three times as much to build.
fn resize_pixels(src: &ImageRef, dst: &mut Image, options: &ResizeOptions) {
    fn typed<P: PixelTrait>(src: &ImageRef, dst: &mut Image, options: &ResizeOptions) {
        let src = src.image_view::<P>().expect("the source's pixel kind");
        let mut dst = dst.image_view_mut::<P>().expect("the source's pixel kind");
        Resizer::new()
            .resize_typed(&src, &mut dst, options)
            .expect("a crop within the source");
    }
    match src.pixel_type() {
        PixelType::U8 => typed::<pixels::U8>(src, dst, options),
        PixelType::U8x3 => typed::<pixels::U8x3>(src, dst, options),
        PixelType::U8x4 => typed::<pixels::U8x4>(src, dst, options),
        other => unreachable!("no {other:?} image is resized"),
    }
}

/// Rows a band when `height` rows are shared out: a few bands a core, so a
/// slow band does not hold the others up.
pub fn band_rows(height: u32) -> u32 {
    height.div_ceil(4 * rayon::current_num_threads() as u32)
}

/// How far the filter reads from a pixel, in pixels of the larger side.
fn filter_reach(filter: Filter) -> f64 {
    match filter {
        Filter::CatmullRom => 2.0,
        Filter::Bilinear => 1.0,
    }
}

/// Rows `first_row..` of a one-byte-a-pixel plane resized to `size`, as
/// many as fill `band`: `resize_gray` a band at a time. A matte is mostly 0
/// and 255: where every source pixel a run of the band's pixels reads holds
/// one value, the run is that value (the filter's weights sum to one), and
/// the filter runs only on the spans of columns between such runs.
pub fn resize_gray_band(
    src: &[u8],
    src_size: (u32, u32),
    size: (u32, u32),
    first_row: u32,
    band: &mut [u8],
) {
    let width = size.0 as usize;
    if src_size == size {
        let start = first_row as usize * width;
        band.copy_from_slice(&src[start..start + band.len()]);
        return;
    }
    let src_ref = ImageRef::new(src_size.0, src_size.1, src, PixelType::U8)
        .expect("the plane's length matches its size");
    let rows = band.len() / width;
    let first_row = first_row as usize;
    let rows_read = reads(src_size.1, size.1, first_row..first_row + rows);
    let column_value = column_values(src, src_size.0 as usize, rows_read);
    let value_read_at = |x: usize| one_value(&column_value[reads(src_size.0, size.0, x..x + 1)]);
    for (span, value) in runs(width, value_read_at) {
        match value {
            Some(v) => band
                .chunks_exact_mut(width)
                .for_each(|row| row[span.clone()].fill(v)),
            None => {
                let mut filtered = vec![0; span.len() * rows];
                let columns = span.start as u32..span.end as u32;
                resize_band(
                    &src_ref,
                    size,
                    Filter::CatmullRom,
                    first_row as u32,
                    columns,
                    &mut filtered,
                );
                for (row, from) in band
                    .chunks_exact_mut(width)
                    .zip(filtered.chunks_exact(span.len()))
                {
                    row[span.clone()].copy_from_slice(from);
                }
            }
        }
    }
}

/// A one-value run shorter than this is filtered with the spans beside it:
/// each span of its own costs the resizer's set-up.
const SHORTEST_RUN: usize = 32;

/// `0..width` cut into runs of one `value_at`, the runs with a value of
/// fewer than `SHORTEST_RUN` pixels joined to the runs without one.
fn runs(width: usize, value_at: impl Fn(usize) -> Option<u8>) -> Vec<(Range<usize>, Option<u8>)> {
    let mut runs: Vec<(Range<usize>, Option<u8>)> = Vec::new();
    for x in 0..width {
        let value = value_at(x);
        match runs.last_mut() {
            Some((span, last)) if *last == value => span.end = x + 1,
            _ => runs.push((x..x + 1, value)),
        }
    }
    let mut joined: Vec<(Range<usize>, Option<u8>)> = Vec::new();
    for (span, value) in runs {
        let value = value.filter(|_| span.len() >= SHORTEST_RUN);
        match joined.last_mut() {
            Some((last_span, None)) if value.is_none() => last_span.end = span.end,
            _ => joined.push((span, value)),
        }
    }
    joined
}

/// The source indices (rows or columns) that Catmull-Rom reads to make
/// `out` of `n_out` from `n_src`: it reaches 2 pixels either side of an
/// output pixel's centre, counted in source pixels when enlarging and in
/// output pixels when shrinking; 1 more allows for rounding.
fn reads(n_src: u32, n_out: u32, out: Range<usize>) -> Range<usize> {
    let scale = f64::from(n_src) / f64::from(n_out);
    let reach = 2.0 * scale.max(1.0) + 1.0;
    let start = (out.start as f64 * scale - reach).floor().max(0.0) as usize;
    let end = (out.end as f64 * scale + reach).ceil() as usize;
    start..end.min(n_src as usize)
}

/// Each column of `rows` of the plane: its value where all those rows
/// hold the same one.
fn column_values(plane: &[u8], width: usize, rows: Range<usize>) -> Vec<Option<u8>> {
    let row = |y: usize| &plane[y * width..][..width];
    let mut values: Vec<Option<u8>> = row(rows.start).iter().copied().map(Some).collect();
    for y in rows.skip(1) {
        for (value, &pixel) in values.iter_mut().zip(row(y)) {
            if *value != Some(pixel) {
                *value = None;
            }
        }
    }
    values
}

/// The value all of `values` hold, if they hold one.
fn one_value(values: &[Option<u8>]) -> Option<u8> {
    let first = *values.first()?;
    values
        .iter()
        .all(|&v| v == first)
        .then_some(first)
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest difference of two sets of pixels, byte by byte.
    fn off_by(a: &[u8], b: &[u8]) -> Option<u8> {
        a.iter().zip(b).map(|(a, b)| a.abs_diff(*b)).max()
    }

    /// The whole resize in one go, as fast_image_resize does it.
    fn in_one_band(src: &ImageRef, size: (u32, u32), filter: Filter) -> Vec<u8> {
        let mut dst = Image::new(size.0, size.1, src.pixel_type());
        resize_pixels(src, &mut dst, &options(filter));
        dst.into_vec()
    }

    #[test]
    fn bands_resize_as_one_pass_does() {
        let plane: Vec<u8> = (0..97u32 * 61).map(|i| (i * 7919 % 251) as u8).collect();
        let rgb: Vec<u8> = (0..97u32 * 61 * 3)
            .map(|i| (i * 104729 % 253) as u8)
            .collect();
        // Alpha of at least half: where it is near 0, colours come back
        // from premultiplication only roughly, in bands or not.
        let rgba: Vec<u8> = (0..97u32 * 61 * 4)
            .map(|i| match i % 4 {
                3 => 128 + (i * 31 % 128) as u8,
                _ => (i * 7727 % 256) as u8,
            })
            .collect();
        for size in [(300, 211), (40, 17), (97, 500), (13, 1), (20, 3)] {
            let kinds = [
                (&plane, PixelType::U8),
                (&rgb, PixelType::U8x3),
                (&rgba, PixelType::U8x4),
            ];
            let filters = [Filter::CatmullRom, Filter::Bilinear];
            for ((src, kind), filter) in kinds.iter().flat_map(|k| filters.map(|f| (*k, f))) {
                let src = ImageRef::new(97, 61, src, kind).unwrap();
                let banded = resize_in_bands(&src, size, filter);
                let whole = in_one_band(&src, size, filter);
                let worst = off_by(&banded, &whole);
                // Colours divided by their alpha again round apart by a few.
                let most = if kind == PixelType::U8x4 { 3 } else { 1 };
                assert!(
                    worst <= Some(most),
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
            let worst = off_by(&band, rows);
            assert!(worst <= Some(1), "{size:?}: off by {worst:?}");
        }
    }

    #[test]
    fn a_matte_band_is_filled_where_flat_and_filtered_elsewhere_as_the_whole_resize() {
        // 0 around a disc of 255 with a ramp for a rim, and a noisy corner.
        let (w, h) = (120u32, 80u32);
        let matte: Vec<u8> = (0..w * h)
            .map(|i| {
                let (x, y) = (f64::from(i % w), f64::from(i / w));
                let d = ((x - 60.0).powi(2) + (y - 40.0).powi(2)).sqrt();
                match (x, y) {
                    (x, y) if x > 110.0 && y < 10.0 => (i * 7919 % 251) as u8,
                    _ => ((30.0 - d) * 40.0).clamp(0.0, 255.0) as u8,
                }
            })
            .collect();
        for size in [(600, 400), (1000, 90), (60, 40)] {
            let src = ImageRef::new(w, h, &matte, PixelType::U8).unwrap();
            let whole = in_one_band(&src, size, Filter::CatmullRom);
            let width = size.0 as usize;
            for (first_row, rows) in [(0, 30), (size.1 / 2 - 5, 11), (size.1 - 7, 7)] {
                let mut band = vec![7; rows as usize * width];
                resize_gray_band(&matte, (w, h), size, first_row, &mut band);
                let at = first_row as usize * width;
                let worst = off_by(&band, &whole[at..]);
                assert!(
                    worst <= Some(1),
                    "{size:?} from row {first_row}: off by {worst:?}"
                );
            }
        }
    }

    #[test]
    fn a_row_is_cut_into_runs_of_one_value_and_spans_to_filter() {
        let values =
            |v: &[Option<u8>]| -> Vec<(Range<usize>, Option<u8>)> { runs(v.len(), |x| v[x]) };
        let long = SHORTEST_RUN;
        let mut row = vec![Some(0); long];
        row.extend([None, None, Some(9), None]);
        row.extend(vec![Some(255); long - 1]);
        row.extend(vec![Some(255); 1]);
        row.push(Some(3));
        assert_eq!(
            values(&row),
            [
                (0..long, Some(0)),
                (long..long + 4, None),
                (long + 4..2 * long + 4, Some(255)),
                (2 * long + 4..2 * long + 5, None),
            ],
            "short runs of a value are filtered with their neighbours"
        );
    }

    #[test]
    fn a_flat_plane_stays_flat_through_resizing() {
        let out = resize_gray(&[200; 64 * 48], (64, 48), (640, 17));
        assert_eq!(out.len(), 640 * 17);
        assert!(out.iter().all(|&v| v == 200));
    }
}
