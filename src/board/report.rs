//! What `cutout bench` measured on this board, kept in the data directory
//! for the dashboard's Status page, and the configuration it recommends.

use serde::{Deserialize, Serialize};
use std::path::Path;

pub const REPORT_FILE: &str = "bench.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub at_unix: i64,
    pub board: String,
    pub memory_mib: u64,
    pub rows: Vec<Row>,
    /// `model`, `engine`; `None` where nothing general fits.
    pub recommended: Option<(String, String)>,
    /// `type=auto`'s rungs for the configuration that serves.
    #[serde(default)]
    pub ladder: Option<LadderReport>,
}

/// Each rung of `type=auto`, then of `type=person`, timed on this board,
/// cheapest first, for one model and engine: every view of the rung runs
/// (the most a photo can cost), twice, and the faster run counts (the
/// first plans the sizes).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LadderReport {
    pub model: String,
    pub engine: String,
    /// The photo measured with.
    pub photo: String,
    pub rows: Vec<RungRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RungRow {
    /// Whose ladder: `auto` or `person` (reports from before `person`'s
    /// rungs were timed hold `auto`'s alone).
    #[serde(default = "type_auto")]
    pub subject: String,
    /// Its name (`pipeline::Rung`, `pipeline::PersonRung`).
    pub rung: String,
    pub outcome: Measurement,
}

fn type_auto() -> String {
    "auto".into()
}

impl LadderReport {
    /// Whether `subject`'s rungs were timed.
    pub fn has(&self, subject: &str) -> bool {
        self.rows.iter().any(|row| row.subject == subject)
    }

    /// The seconds measured for `subject`'s `rung`, if it was.
    pub fn seconds(&self, subject: &str, rung: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|row| row.subject == subject && row.rung == rung)
            .and_then(|row| match row.outcome {
                Measurement::Measured { seconds, .. } => Some(seconds),
                Measurement::Not(_) => None,
            })
    }
}

impl RungRow {
    pub fn line(&self) -> String {
        let what = match &self.outcome {
            Measurement::Measured {
                seconds, peak_mib, ..
            } => format!("{seconds:.2} s per photo at most, peak {peak_mib} MiB"),
            Measurement::Not(why) => format!("not measured: {why}"),
        };
        format!("type={} as {}: {what}", self.subject, self.rung)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub model: String,
    pub engine: String,
    pub outcome: Measurement,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Measurement {
    Measured {
        load_seconds: f64,
        /// One 12 MP photo: decode, model, matte, PNG.
        seconds: f64,
        peak_mib: u64,
    },
    /// Not measured, and why (out of time, failed, killed).
    Not(String),
}

/// Models in the order the recommendation prefers them, best cut-outs
/// first; MODNet is left out, as it keeps people only (`type=person` runs
/// it on any board).
const GENERAL_BY_QUALITY: &[&[&str]] = &[&["isnet", "isnet-int8"], &["u2netp"]];

/// Of a model's peak, this much of the board's memory may go to one
/// cut-out; the rest is for the system, uploads waiting their turn and
/// IS-Net's second opinion (MODNet).
const PEAK_SHARE_PERCENT: u64 = 60;

impl Report {
    /// The best cut-outs whose peak fits the board with room, on the
    /// faster engine.
    pub fn recommend(rows: &[Row], memory_mib: u64) -> Option<(String, String)> {
        for tier in GENERAL_BY_QUALITY {
            let fastest = rows
                .iter()
                .filter(|row| tier.contains(&row.model.as_str()))
                .filter_map(|row| match row.outcome {
                    Measurement::Measured {
                        seconds, peak_mib, ..
                    } if peak_mib * 100 <= memory_mib * PEAK_SHARE_PERCENT => Some((row, seconds)),
                    _ => None,
                })
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((row, _)) = fastest {
                return Some((row.model.clone(), row.engine.clone()));
            }
        }
        None
    }

    pub fn save(&self, data_dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let path = data_dir.join(REPORT_FILE);
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, json)?;
        std::fs::rename(partial, path)
    }

    pub fn load(data_dir: &Path) -> Option<Report> {
        serde_json::from_slice(&std::fs::read(data_dir.join(REPORT_FILE)).ok()?).ok()
    }

    /// The table `cutout bench` prints and the Status page shows.
    pub fn lines(&self) -> Vec<String> {
        self.rows.iter().map(Row::line).collect()
    }
}

impl Row {
    pub fn line(&self) -> String {
        let what = match &self.outcome {
            Measurement::Measured {
                load_seconds,
                seconds,
                peak_mib,
            } => format!(
                "{seconds:.2} s per 12 MP photo, peak {peak_mib} MiB (loads in {load_seconds:.1} s)"
            ),
            Measurement::Not(why) => format!("not measured: {why}"),
        };
        format!("{} on {}: {what}", self.model, self.engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(model: &str, engine: &str, seconds: f64, peak_mib: u64) -> Row {
        Row {
            model: model.into(),
            engine: engine.into(),
            outcome: Measurement::Measured {
                load_seconds: 1.0,
                seconds,
                peak_mib,
            },
        }
    }

    #[test]
    fn it_recommends_the_best_model_that_fits_on_the_faster_engine() {
        let rows = vec![
            measured("u2netp", "onnxruntime", 0.5, 330),
            measured("u2netp", "tract", 0.9, 240),
            measured("modnet", "onnxruntime", 0.6, 330),
            measured("isnet", "onnxruntime", 2.0, 760),
            measured("isnet", "tract", 7.0, 620),
        ];
        let pick = |memory| Report::recommend(&rows, memory);
        let pair = |m: &str, e: &str| Some((m.to_owned(), e.to_owned()));
        assert_eq!(pick(4096), pair("isnet", "onnxruntime"));
        // 1 GiB: IS-Net's 620 MiB is over 60% of it; U2NetP fits.
        assert_eq!(pick(1024), pair("u2netp", "onnxruntime"));
        assert_eq!(pick(450), pair("u2netp", "tract"));
        assert_eq!(pick(300), None);
        let mut killed = rows.clone();
        killed[3].outcome = Measurement::Not("killed by signal 9".into());
        assert_eq!(Report::recommend(&killed, 4096), pair("isnet", "tract"));
    }
}
