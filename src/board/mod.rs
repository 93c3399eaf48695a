//! The machine cutout finds itself on, and the model, engine and upload
//! buffer that fit it. These are the lowest configuration layer: on first
//! start of `serve` (or `remove`) they fill what the command line,
//! `CUTOUT_*` variables and `cutout.toml` leave unset. The rule and the
//! measurements behind each threshold are in README.md ("Choosing a model
//! for your board").

use crate::config::{BoardFound, Config, EngineKind, ServerConfig};
use std::path::Path;

mod known;
mod report;

pub use known::{known_board, KnownBoard, KNOWN_BOARDS};
pub use report::{LadderReport, Measurement, Report, Row, RungRow, REPORT_FILE};

/// What the defaults are chosen from.
#[derive(Debug, Clone, PartialEq)]
pub struct Board {
    /// The board's model (a Raspberry Pi's device tree) or its CPU's name.
    pub name: String,
    /// Bytes cutout may use: the machine's memory, or its cgroup's limit
    /// (a unit's `MemoryMax=`, a container's) where that is lower.
    pub memory: u64,
    pub cores: usize,
    /// The CPU multiplies int8 vectors with 32-bit sums in one instruction
    /// (Arm's SDOT, x86's VNNI): what makes an int8 model faster than f32.
    pub int8_dot_product: bool,
}

const MIB: u64 = 1024 * 1024;

/// Below this, IS-Net does not fit with room to spare: on ONNX Runtime its
/// peak under four concurrent 12 MP uploads is about 1,070 MiB with
/// `type=auto`'s three views (a second input size, and U2NetP), and its
/// second opinion loads MODNet beside it (about 100 MiB more); the system
/// needs its own 150 MiB. U2NetP alone peaks at 240 MiB.
pub const ISNET_MIN_MEMORY: u64 = 1536 * MIB;

/// Uploads held at once where IS-Net does not fit: four of the largest.
pub const SMALL_UPLOAD_BUFFER_MIB: u64 = 40;

/// The most megapixels a photo may have where IS-Net does not fit. A
/// photo's pixels, its resized copy and its cut-out take about 14 bytes a
/// pixel at the peak: two 25 MP photos at once stay within a 512 MiB
/// board, where a single 50 MP one (700 MiB) would not.
pub const SMALL_BOARD_MAX_MEGAPIXELS: u64 = 25;

/// What the idle server holds where IS-Net fits, with room for the system
/// beside it: IS-Net f32 on ONNX Runtime with U2NetP and MODNet loaded and
/// each run on a square photo and a 16:9 one took 1,050 MiB (x86).
pub const IDLE_WITH_ISNET: u64 = 1280 * MIB;

/// The memory budget of the requests at work (`server.memory_budget_mib`).
/// On a board too small for IS-Net, two fifths of it: U2NetP on tract
/// idles in 63 MiB, 164 MiB with MODNet loaded for `type=person`, and each
/// model run holds 55-70 MiB more while it runs; a 25 MP photo, the most
/// such a board takes, needs 180 MiB at its peak. Elsewhere what the idle
/// server leaves (`IDLE_WITH_ISNET`), but never under a quarter of the board.
pub fn memory_budget(memory: u64) -> u64 {
    if memory < ISNET_MIN_MEMORY {
        memory / 5 * 2
    } else {
        memory.saturating_sub(IDLE_WITH_ISNET).max(memory / 4)
    }
}

/// What the board's defaults set, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardDefaults {
    pub model: &'static str,
    pub engine: EngineKind,
    /// `None`: the general default (`server.upload_buffer_mib`).
    pub upload_buffer_mib: Option<u64>,
    /// `None`: the general default (`server.max_megapixels`, 50).
    pub max_megapixels: Option<u64>,
    /// `server.memory_budget_mib`: `memory_budget`.
    pub memory_budget_mib: u64,
    /// Whether a request's `type=general` may load IS-Net beside the
    /// configured model; where it does not fit, the configured model
    /// answers it.
    pub isnet_fits: bool,
    pub why: String,
}

/// What is installed beside the binary, as far as the rule cares.
pub struct Installed {
    pub onnxruntime: bool,
    /// isnet-int8's file for each engine.
    pub isnet_int8: bool,
    pub isnet_int8_on_tract: bool,
}

impl Installed {
    pub fn find(models_dir: &Path, onnxruntime_library: Option<&Path>) -> Installed {
        let manifest = crate::engine::Manifest::builtin();
        let library = onnxruntime_library
            .map(Path::to_path_buf)
            .unwrap_or_else(|| models_dir.join(&manifest.onnxruntime.file));
        let isnet_int8 = |engine| {
            manifest
                .model(Some("isnet-int8"))
                .is_some_and(|spec| spec.installed_for(engine, models_dir))
        };
        Installed {
            onnxruntime: manifest.onnxruntime.sha256_here().is_some() && library.is_file(),
            isnet_int8: isnet_int8(EngineKind::Onnxruntime),
            isnet_int8_on_tract: isnet_int8(EngineKind::Tract),
        }
    }
}

impl Board {
    pub fn detect() -> Board {
        let total = read("/proc/meminfo")
            .as_deref()
            .and_then(meminfo_total)
            .unwrap_or(u64::MAX);
        let limit = read("/proc/self/cgroup")
            .as_deref()
            .and_then(|cgroups| cgroup_memory_limit(cgroups, Path::new("/sys/fs/cgroup")))
            .unwrap_or(u64::MAX);
        Board {
            name: board_name(),
            memory: total.min(limit),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            int8_dot_product: int8_dot_product(),
        }
    }

    /// A board the estimate knows (`ladder::KNOWN_BOARDS`), by name, with
    /// its common memory and four cores, as `cutout ladder --board` takes it.
    pub fn named(name: &str) -> anyhow::Result<Board> {
        let known = known_board(name).ok_or_else(|| {
            let names: Vec<&str> = KNOWN_BOARDS.iter().map(|b| b.name).collect();
            anyhow::anyhow!(
                "no published figures for {name:?}; known: {}",
                names.join(", ")
            )
        })?;
        Ok(Board {
            name: known.name.to_owned(),
            memory: known.memory_mib * MIB,
            cores: 4,
            int8_dot_product: known.int8_dot_product,
        })
    }

    /// "Raspberry Pi 4 Model B Rev 1.4, 4 cores, 1900 MiB".
    pub fn describe(&self) -> String {
        let int8 = if self.int8_dot_product {
            ", int8 dot products"
        } else {
            ""
        };
        format!(
            "{}, {} cores{int8}, {} MiB",
            self.name,
            self.cores,
            self.memory / MIB
        )
    }

    /// The rule README.md writes out, from top to bottom; `engine` is the
    /// one configured, if any, which the model must run on.
    pub fn defaults(&self, installed: &Installed, engine: Option<EngineKind>) -> BoardDefaults {
        if self.memory < ISNET_MIN_MEMORY {
            return BoardDefaults {
                model: "u2netp",
                engine: EngineKind::Tract,
                upload_buffer_mib: Some(SMALL_UPLOAD_BUFFER_MIB),
                max_megapixels: Some(SMALL_BOARD_MAX_MEGAPIXELS),
                memory_budget_mib: memory_budget(self.memory) / MIB,
                isnet_fits: false,
                why: format!(
                    "under the {} MiB IS-Net needs with room: u2netp, on tract (ONNX \
                     Runtime's library and arena would take 100 MiB more), uploads held at \
                     once capped at {SMALL_UPLOAD_BUFFER_MIB} MiB, photos at \
                     {SMALL_BOARD_MAX_MEGAPIXELS} megapixels, requests' memory at {} MiB",
                    ISNET_MIN_MEMORY / MIB,
                    memory_budget(self.memory) / MIB
                ),
            };
        }
        let tract_why = match engine {
            Some(EngineKind::Tract) => Some("room for IS-Net, on tract as configured"),
            _ if !installed.onnxruntime => {
                Some("room for IS-Net; ONNX Runtime is not installed: tract")
            }
            _ => None,
        };
        let (engine, int8_installed) = match tract_why {
            Some(_) => (EngineKind::Tract, installed.isnet_int8_on_tract),
            None => (EngineKind::Onnxruntime, installed.isnet_int8),
        };
        let (model, int8) = match (self.int8_dot_product, int8_installed) {
            (true, true) => ("isnet-int8", "the CPU has int8 dot products: isnet-int8"),
            (true, false) => ("isnet", "isnet (isnet-int8 is not installed)"),
            (false, _) => ("isnet", "no int8 dot products on this CPU: isnet"),
        };
        let room = tract_why.unwrap_or("room for IS-Net, on onnxruntime");
        BoardDefaults {
            model,
            engine,
            upload_buffer_mib: None,
            max_megapixels: None,
            memory_budget_mib: memory_budget(self.memory) / MIB,
            isnet_fits: true,
            why: format!(
                "{room}; {int8}; requests' memory at {} MiB",
                memory_budget(self.memory) / MIB
            ),
        }
    }
}

impl BoardDefaults {
    /// Where this board has timed IS-Net in f32 and in int8 on the engine
    /// chosen (`cutout bench`), the faster of the two serves, whatever the
    /// instruction set says: int8 can pay without dot products (an x86
    /// with AVX2 alone: 3.23 s a 12 MP photo against 5.19 s on ONNX
    /// Runtime) and lose on tract.
    pub fn follow(mut self, board: &Board, report: Option<&Report>) -> BoardDefaults {
        let Some(report) = report.filter(|r| r.board.starts_with(&board.name)) else {
            return self;
        };
        if !self.isnet_fits {
            return self;
        }
        let seconds = |model: &str| {
            report.rows.iter().find_map(|row| match row.outcome {
                Measurement::Measured { seconds, .. }
                    if row.model == model && row.engine == self.engine.to_string() =>
                {
                    Some(seconds)
                }
                _ => None,
            })
        };
        if let (Some(f32), Some(int8)) = (seconds("isnet"), seconds("isnet-int8")) {
            let (model, faster, slower) = match int8 < f32 {
                true => ("isnet-int8", int8, f32),
                false => ("isnet", f32, int8),
            };
            if model != self.model {
                self.why = format!(
                    "{}; but this board measured {model} faster ({faster:.2} s a 12 MP photo \
                     against {slower:.2} s): {model}",
                    self.why
                );
                self.model = model;
            }
        }
        self
    }

    /// What the log and the Status page say of the choice.
    pub fn summary(&self) -> String {
        format!("{} on {} ({})", self.model, self.engine, self.why)
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn meminfo_total(meminfo: &str) -> Option<u64> {
    let kib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// The memory limit on this process's cgroup and its ancestors, from
/// `/proc/self/cgroup`: cgroup v1's memory controller where it is mounted
/// (its `hierarchical_memory_limit` already takes the ancestors in), else
/// v2's `memory.max` up the tree. `None`: no limit.
fn cgroup_memory_limit(cgroups: &str, root: &Path) -> Option<u64> {
    let mut unified = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            let stat = std::fs::read_to_string(root.join("memory").join(path).join("memory.stat"));
            if let Ok(stat) = stat {
                return stat
                    .lines()
                    .find_map(|l| l.strip_prefix("hierarchical_memory_limit "))
                    .and_then(|n| n.trim().parse().ok());
            }
        } else if controllers.is_empty() {
            unified = Some(path);
        }
    }
    let mut dir = root.join(unified?);
    let mut limit: Option<u64> = None;
    while dir.starts_with(root) {
        if let Ok(max) = std::fs::read_to_string(dir.join("memory.max")) {
            if let Ok(bytes) = max.trim().parse::<u64>() {
                limit = Some(limit.map_or(bytes, |l| l.min(bytes)));
            }
        }
        if !dir.pop() {
            break;
        }
    }
    limit
}

fn board_name() -> String {
    // A Raspberry Pi says what it is ("Raspberry Pi 4 Model B Rev 1.4").
    if let Some(model) = read("/proc/device-tree/model") {
        let model = model.trim_end_matches('\0').trim();
        if !model.is_empty() {
            return model.to_owned();
        }
    }
    read("/proc/cpuinfo")
        .as_deref()
        .and_then(cpu_name)
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

/// x86's "model name", or an Arm core from its part number.
fn cpu_name(cpuinfo: &str) -> Option<String> {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
    };
    if let Some(name) = field("model name") {
        return Some(name);
    }
    let part = field("CPU part")?;
    let core = match (field("CPU implementer").as_deref(), part.as_str()) {
        (Some("0x41"), "0xd03") => "Cortex-A53",
        (Some("0x41"), "0xd04") => "Cortex-A35",
        (Some("0x41"), "0xd05") => "Cortex-A55",
        (Some("0x41"), "0xd07") => "Cortex-A57",
        (Some("0x41"), "0xd08") => "Cortex-A72",
        (Some("0x41"), "0xd09") => "Cortex-A73",
        (Some("0x41"), "0xd0b") => "Cortex-A76",
        _ => return Some(format!("Arm CPU part {part}")),
    };
    Some(core.to_owned())
}

#[cfg(target_arch = "aarch64")]
fn int8_dot_product() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

#[cfg(target_arch = "x86_64")]
fn int8_dot_product() -> bool {
    std::arch::is_x86_feature_detected!("avx512vnni")
        || std::arch::is_x86_feature_detected!("avxvnni")
}

#[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
fn int8_dot_product() -> bool {
    false
}

impl BoardDefaults {
    /// The board and these defaults, as the settings carry them.
    pub fn found_on(&self, board: &Board) -> BoardFound {
        BoardFound {
            description: board.describe(),
            defaults: self.summary(),
            isnet_fits: self.isnet_fits,
        }
    }

    /// The defaults as a configuration layer, to go under the others.
    pub fn as_config(&self) -> Config {
        Config {
            model: Some(self.model.to_owned()),
            engine: Some(self.engine),
            server: ServerConfig {
                upload_buffer_mib: self.upload_buffer_mib,
                max_megapixels: self.max_megapixels,
                memory_budget_mib: Some(self.memory_budget_mib),
                ..ServerConfig::default()
            },
            ..Config::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    #[test]
    fn the_defaults_go_under_every_other_layer() {
        let small = Board {
            name: "test".into(),
            memory: 512 << 20,
            cores: 4,
            int8_dot_product: false,
        };
        let everything = Installed {
            onnxruntime: true,
            isnet_int8: true,
            isnet_int8_on_tract: true,
        };
        let defaults = small.defaults(&everything, None);
        let file = Config::parse_str("model = \"modnet\"\n").unwrap();
        let settings = Settings::from_config(file.over(defaults.as_config())).unwrap();
        assert_eq!(settings.model.as_deref(), Some("modnet"));
        assert_eq!(settings.engine.kind, EngineKind::Tract);
        assert_eq!(settings.upload_buffer, SMALL_UPLOAD_BUFFER_MIB << 20);
        assert_eq!(settings.max_pixels, SMALL_BOARD_MAX_MEGAPIXELS * 1_000_000);
        let file = Config::parse_str("engine = \"onnxruntime\"\n[server]\nupload_buffer_mib = 8\n")
            .unwrap();
        let settings = Settings::from_config(file.over(defaults.as_config())).unwrap();
        assert_eq!(settings.model.as_deref(), Some("u2netp"));
        assert_eq!(settings.engine.kind, EngineKind::Onnxruntime);
        assert_eq!(settings.upload_buffer, 8 << 20);
        assert_eq!(settings.memory_budget, 204 << 20);
        let file = Config::parse_str("[server]\nmemory_budget_mib = 100\n").unwrap();
        let settings = Settings::from_config(file.over(defaults.as_config())).unwrap();
        assert_eq!(settings.memory_budget, 100 << 20);
        let none = Config::parse_str("[server]\nmemory_budget_mib = 0\n").unwrap();
        assert!(Settings::from_config(none).is_err());
        assert_eq!(
            Settings::default().memory_budget,
            u64::MAX,
            "no board, no bound"
        );
    }

    #[test]
    fn the_memory_budget_is_what_each_board_leaves_its_requests() {
        let mib = |memory_mib: u64| memory_budget(memory_mib * MIB) / MIB;
        // A Pi Zero 2 or 3: two fifths; a 25 MP photo needs 180 MiB.
        assert_eq!(mib(512), 204);
        assert_eq!(mib(1024), 409);
        // Pi 4 and Pi 5: what IS-Net's idle server leaves.
        assert_eq!(mib(2048), 768);
        assert_eq!(mib(4096), 2816);
        // Never under a quarter of the board.
        assert_eq!(mib(1536), 384);
    }

    fn board(memory_mib: u64, int8_dot_product: bool) -> Board {
        Board {
            name: "test".into(),
            memory: memory_mib * MIB,
            cores: 4,
            int8_dot_product,
        }
    }

    const EVERYTHING: Installed = Installed {
        onnxruntime: true,
        isnet_int8: true,
        isnet_int8_on_tract: true,
    };

    #[test]
    fn a_boards_own_measurement_of_int8_and_f32_decides_between_them() {
        let row = |model: &str, engine: &str, seconds| Row {
            model: model.into(),
            engine: engine.into(),
            outcome: Measurement::Measured {
                load_seconds: 1.0,
                seconds,
                peak_mib: 900,
            },
        };
        let avx2 = board(8192, false);
        let report = |rows| Report {
            at_unix: 0,
            board: avx2.describe(),
            memory_mib: 8192,
            rows,
            recommended: None,
            ladder: None,
        };
        // No dot products, yet int8 measured faster on ONNX Runtime.
        let measured = report(vec![
            row("isnet", "onnxruntime", 5.19),
            row("isnet-int8", "onnxruntime", 3.23),
            row("isnet-int8", "tract", 27.3),
        ]);
        let follow = |b: &Board, report| b.defaults(&EVERYTHING, None).follow(b, report);
        let defaults = follow(&avx2, Some(&measured));
        assert_eq!(defaults.model, "isnet-int8");
        assert!(defaults.why.contains("3.23 s"), "{}", defaults.why);
        assert_eq!(follow(&avx2, None).model, "isnet");
        // On tract int8 is three times slower here: f32 stays.
        let on_tract = avx2.defaults(&EVERYTHING, Some(EngineKind::Tract));
        let measured_tract = report(vec![
            row("isnet", "tract", 9.1),
            row("isnet-int8", "tract", 27.3),
        ]);
        assert_eq!(on_tract.follow(&avx2, Some(&measured_tract)).model, "isnet");
        // With dot products and int8 slower (it can happen): f32.
        let vnni = board(8192, true);
        let slower = Report {
            board: vnni.describe(),
            ..report(vec![
                row("isnet", "onnxruntime", 2.0),
                row("isnet-int8", "onnxruntime", 2.5),
            ])
        };
        assert_eq!(follow(&vnni, Some(&slower)).model, "isnet");
        // Another board's report, or only one of the two measured: the rule.
        let other = Report {
            board: "Raspberry Pi 4 Model B, 4 cores, 4096 MiB".into(),
            ..measured.clone()
        };
        assert_eq!(follow(&avx2, Some(&other)).model, "isnet");
        let one = report(vec![row("isnet-int8", "onnxruntime", 3.23)]);
        assert_eq!(follow(&avx2, Some(&one)).model, "isnet");
        // Too small for IS-Net: U2NetP whatever was measured.
        let small = board(1024, false);
        let small_report = Report {
            board: small.describe(),
            ..measured.clone()
        };
        assert_eq!(follow(&small, Some(&small_report)).model, "u2netp");
    }

    #[test]
    fn each_board_class_gets_the_model_and_engine_that_fit_it() {
        let pick = |b: Board, installed: &Installed| {
            let d = b.defaults(installed, None);
            (d.model, d.engine, d.upload_buffer_mib, d.isnet_fits)
        };
        let small = (
            "u2netp",
            EngineKind::Tract,
            Some(SMALL_UPLOAD_BUFFER_MIB),
            false,
        );
        // Pi Zero 2 (512 MB), Pi 3 (1 GB), even with a fast CPU.
        assert_eq!(pick(board(512, false), &EVERYTHING), small);
        assert_eq!(pick(board(1024, true), &EVERYTHING), small);
        assert_eq!(pick(board(1535, true), &EVERYTHING), small);
        // Pi 4 (2 GB, no SDOT), Pi 5 (4 GB, SDOT).
        let pi4 = pick(board(2048, false), &EVERYTHING);
        assert_eq!(pi4, ("isnet", EngineKind::Onnxruntime, None, true));
        let pi5 = pick(board(4096, true), &EVERYTHING);
        assert_eq!(pi5, ("isnet-int8", EngineKind::Onnxruntime, None, true));
        let without_int8 = Installed {
            onnxruntime: true,
            isnet_int8: false,
            isnet_int8_on_tract: true,
        };
        assert_eq!(pick(board(4096, true), &without_int8).0, "isnet");
        let tract_only = Installed {
            onnxruntime: false,
            isnet_int8: true,
            isnet_int8_on_tract: true,
        };
        assert_eq!(
            pick(board(4096, true), &tract_only),
            ("isnet-int8", EngineKind::Tract, None, true)
        );
        assert_eq!(
            pick(board(4096, false), &tract_only),
            ("isnet", EngineKind::Tract, None, true)
        );
        // tract configured: its own int8 file, where it is installed.
        let d = board(4096, true).defaults(&EVERYTHING, Some(EngineKind::Tract));
        assert_eq!((d.model, d.engine), ("isnet-int8", EngineKind::Tract));
        let without_tracts_int8 = Installed {
            isnet_int8_on_tract: false,
            ..EVERYTHING
        };
        let d = board(4096, true).defaults(&without_tracts_int8, Some(EngineKind::Tract));
        assert_eq!((d.model, d.engine), ("isnet", EngineKind::Tract));
        let d = board(512, true).defaults(&EVERYTHING, Some(EngineKind::Tract));
        assert_eq!(d.model, "u2netp");
        let d = board(4096, true).defaults(&EVERYTHING, Some(EngineKind::Onnxruntime));
        assert_eq!(d.model, "isnet-int8");
    }

    #[test]
    fn memory_is_the_machines_or_its_cgroups_limit() {
        assert_eq!(
            meminfo_total("MemTotal:        3884376 kB\nMemFree: 1 kB\n"),
            Some(3884376 * 1024)
        );
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("memory/board/a53");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(
            v1.join("memory.stat"),
            "cache 0\nhierarchical_memory_limit 536870912\n",
        )
        .unwrap();
        let cgroups = "5:devices:/\n4:memory:/board/a53\n0::/\n";
        assert_eq!(cgroup_memory_limit(cgroups, root.path()), Some(512 * MIB));
        // v2: the lowest memory.max on the way up; "max" is no limit.
        let v2 = root.path().join("system.slice/cutout.service");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        std::fs::write(root.path().join("system.slice/memory.max"), "1073741824\n").unwrap();
        let cgroups = "0::/system.slice/cutout.service\n";
        assert_eq!(cgroup_memory_limit(cgroups, root.path()), Some(1024 * MIB));
        assert_eq!(cgroup_memory_limit("0::/elsewhere\n", root.path()), None);
    }

    #[test]
    fn cpus_are_named_by_model_or_arm_part() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\n";
        assert_eq!(cpu_name(x86).as_deref(), Some("AMD EPYC 9B14"));
        let a72 = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n";
        assert_eq!(cpu_name(a72).as_deref(), Some("Cortex-A72"));
        let other = "CPU implementer\t: 0x51\nCPU part\t: 0x801\n";
        assert_eq!(cpu_name(other).as_deref(), Some("Arm CPU part 0x801"));
    }
}
