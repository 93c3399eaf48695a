//! The boards the time estimate knows: the multiply-adds a second that
//! published benchmarks give each one's CPU, where they come from, and
//! what its defaults follow from when it is only named.

use crate::config::EngineKind;

/// A board the estimate knows: sustained multiply-adds a second that
/// published benchmarks give its CPU on all its cores with ONNX Runtime,
/// f32 and int8, where they come from, and what the board rule needs to
/// pick its defaults when the board is only named (`cutout ladder --board`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownBoard {
    pub name: &'static str,
    /// What `Board::detect` finds in its name: the board or its core.
    pub known_by: &'static [&'static str],
    pub gmacs_f32: f64,
    pub gmacs_int8: f64,
    pub int8_dot_product: bool,
    /// The common memory size, for the board rule.
    pub memory_mib: u64,
    pub source: &'static str,
}

/// BENCHMARKS.md, "Cost, counted", has the arithmetic.
pub const KNOWN_BOARDS: [KnownBoard; 3] = [
    KnownBoard {
        name: "Raspberry Pi 5",
        known_by: &["Raspberry Pi 5", "Cortex-A76"],
        gmacs_f32: 35.0,
        gmacs_int8: 70.0,
        int8_dot_product: true,
        memory_mib: 4096,
        source: "f32: YOLOX-M/L/X at 1.1/0.5/0.3 images/s (visionanalysis.org, ncnn FP32 vs \
                 ONNX FP32 on Raspberry Pi 5) and YOLO11s at 324 ms (Ultralytics' Raspberry Pi \
                 guide); int8 2x f32 with SDOT (4x at the kernel: sonos/tract #2278, \
                 microsoft/onnxruntime #6916; VNNI 1.65-1.9x end to end on x86 here)",
    },
    KnownBoard {
        name: "Raspberry Pi 4",
        known_by: &[
            "Raspberry Pi 4",
            "Raspberry Pi 400",
            "Compute Module 4",
            "Cortex-A72",
        ],
        gmacs_f32: 12.0,
        gmacs_int8: 16.0,
        int8_dot_product: false,
        memory_mib: 4096,
        source: "f32: YOLOv8s/n at 1,436/560 ms (Ultralytics' Raspberry Pi guide); int8 \
                 without dot products 1.35x f32 (ncnn's benchmark README, Pi 4: ResNet-50 \
                 int8 against f32)",
    },
    KnownBoard {
        name: "Raspberry Pi 3",
        known_by: &["Raspberry Pi 3", "Raspberry Pi Zero 2", "Cortex-A53"],
        gmacs_f32: 5.0,
        gmacs_int8: 7.5,
        int8_dot_product: false,
        memory_mib: 1024,
        source: "f32: ncnn's benchmark README, Pi 3B+ ResNets, scaled by ONNX Runtime's speed \
                 over ncnn's on the Pi 4 (0.73); int8 without dot products 1.5x f32 (XNNPACK's \
                 README: int8 MobileNets 2.7-3.2x f32 on a Pi 4, discounted to ResNet-like \
                 convolutions)",
    },
];

/// The known board whose name or core `board` (a detected board's name,
/// or one a person typed) contains.
pub fn known_board(board: &str) -> Option<&'static KnownBoard> {
    let board = board.to_ascii_lowercase();
    KNOWN_BOARDS.iter().find(|known| {
        known
            .known_by
            .iter()
            .any(|name| board.contains(&name.to_ascii_lowercase()))
    })
}

/// How much slower tract runs these models than ONNX Runtime: f32 at
/// about half its speed (`make bench`: 1.2-1.8x); int8 with dot products
/// also at half (1.9-2.5x); int8 without them at a third of its own f32
/// speed (isnet-int8 on an x86 with AVX2 and no VNNI: 27.3 s a 12 MP
/// photo against 9 s in f32).
const TRACT_F32_SLOWER: f64 = 2.0;
const TRACT_INT8_WITHOUT_DOT_PRODUCTS_SLOWER_THAN_F32: f64 = 3.0;

impl KnownBoard {
    /// Multiply-adds a second on `engine`, f32 and int8.
    pub fn rates(&self, engine: EngineKind) -> (f64, f64) {
        const GIGA: f64 = 1e9;
        let (f32, int8) = (self.gmacs_f32 * GIGA, self.gmacs_int8 * GIGA);
        match engine {
            EngineKind::Onnxruntime => (f32, int8),
            EngineKind::Tract if self.int8_dot_product => {
                (f32 / TRACT_F32_SLOWER, int8 / TRACT_F32_SLOWER)
            }
            EngineKind::Tract => (
                f32 / TRACT_F32_SLOWER,
                f32 / TRACT_F32_SLOWER / TRACT_INT8_WITHOUT_DOT_PRODUCTS_SLOWER_THAN_F32,
            ),
        }
    }

    /// What an estimate on this board rests on, in a line.
    pub fn basis(&self, engine: EngineKind) -> String {
        let (f32, int8) = self.rates(engine);
        let dot = match self.int8_dot_product {
            true => "with",
            false => "without",
        };
        format!(
            "an estimate, not a measurement: {} at {:.1} GMAC/s f32 and {:.1} int8 ({dot} int8 \
             dot products) on {engine}{}; from {}",
            self.name,
            f32 / 1e9,
            int8 / 1e9,
            match engine {
                EngineKind::Tract => ", tract taken at half ONNX Runtime's f32 speed",
                EngineKind::Onnxruntime => "",
            },
            self.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boards_are_known_by_their_model_or_their_core() {
        let pi5 = known_board("Raspberry Pi 5 Model B Rev 1.0").unwrap();
        let pi4 = known_board("Raspberry Pi 4 Model B Rev 1.4").unwrap();
        let a53 = known_board("Cortex-A53").unwrap();
        assert!(pi5.gmacs_f32 > pi4.gmacs_f32 && pi4.gmacs_f32 > a53.gmacs_f32);
        assert!(pi5.gmacs_int8 >= 2.0 * pi5.gmacs_f32, "SDOT");
        // int8 on tract without dot products: a third of its f32 speed.
        let (f32, int8) = pi4.rates(EngineKind::Tract);
        assert_eq!((f32, int8 * 3.0), (6e9, 6e9));
        assert_eq!(pi5.rates(EngineKind::Tract), (17.5e9, 35e9));
        assert_eq!(known_board("AMD EPYC 9R14"), None);
        assert_eq!(known_board("raspberry pi 3"), Some(&KNOWN_BOARDS[2]));
    }
}
