//! Any bytes as an upload's image: decoding refuses or gives an image
//! within the pixel limit; it never panics or allocates past its limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(image) = cutout::imaging::decode(data) {
        let pixels = u64::from(image.width()) * u64::from(image.height());
        assert!(pixels > 0 && pixels <= cutout::error::MAX_PIXELS_DECODED);
    }
});
