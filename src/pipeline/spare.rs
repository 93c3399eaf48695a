//! The spare-buffer pool: decoded photos' memory reused.

use image::DynamicImage;
use std::sync::{Mutex, MutexGuard};

/// Decoded photos' memory, handed on to the next request's decode: fresh
/// pages are faulted in one by one, which for a 12 MP photo's 36 MB took a
/// third of the decode. At most one buffer a request that may hold pixels
/// is kept, and none over `MAX_SPARE_BYTES` (less on a small memory
/// budget), so idle memory stays bounded.
pub struct SparePixels {
    buffers: Mutex<Vec<Vec<u8>>>,
    most: usize,
    largest: usize,
}

/// A 16 MP photo with alpha; a larger one's memory goes back to the system.
const MAX_SPARE_BYTES: usize = 64 << 20;

impl SparePixels {
    pub fn new(most: usize) -> SparePixels {
        SparePixels {
            buffers: Mutex::default(),
            most,
            largest: MAX_SPARE_BYTES,
        }
    }

    /// Keeps buffers of at most a thirty-second of a memory budget of
    /// `bytes`; the most all of them hold.
    pub fn with_share_of(&mut self, bytes: u64) -> u64 {
        self.largest = MAX_SPARE_BYTES.min(usize::try_from(bytes / 32).unwrap_or(usize::MAX));
        self.largest as u64 * self.most as u64
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn take(&self) -> Vec<u8> {
        self.lock().pop().unwrap_or_default()
    }

    pub fn give(&self, image: DynamicImage) {
        let pixels = image.into_bytes();
        let mut buffers = self.lock();
        if pixels.capacity() <= self.largest && buffers.len() < self.most {
            buffers.push(pixels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_pixels_are_kept_one_a_running_request_and_never_huge() {
        let image =
            |bytes: usize| DynamicImage::ImageRgb8(image::RgbImage::new(bytes as u32 / 3, 1));
        let spare = SparePixels::new(2);
        assert!(spare.take().is_empty(), "none yet");
        spare.give(image(MAX_SPARE_BYTES + 3));
        for _ in 0..3 {
            spare.give(image(300));
        }
        assert_eq!(spare.take().len(), 300);
        assert_eq!(spare.take().len(), 300);
        assert!(
            spare.take().is_empty(),
            "two kept, the third and the huge one freed"
        );
    }
}
