//! What the server is started with, and where it comes from. Three layers,
//! highest first: the command line, `CUTOUT_*` environment variables, the
//! configuration file (`/etc/cutout/cutout.toml` when present, or
//! `--config`). Each layer is a `Config` with every field optional; the
//! merged result becomes `Settings`, the defaults filling what no layer
//! set. An unknown key in the file is an error that names its line; an
//! unknown `CUTOUT_*` variable is an error that names the variable. Tests
//! build `Settings` directly.

//!
//! Plain settings only: this module imports nothing of the crate, and the
//! modules that act on a setting (the engine, the store, the LED, DNS-SD,
//! the board) interpret it.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_MODELS_DIR: &str = "./models";
pub const DEFAULT_DATA_DIR: &str = "./data";

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/cutout/cutout.toml";

#[derive(Clone)]
pub struct Settings {
    /// The configuration file read (or that would be: it may not exist).
    pub config_file: PathBuf,
    pub data_dir: PathBuf,
    pub models_dir: PathBuf,
    /// Accounts, keys and counters: SQLite in `data_dir`, or a shared PostgreSQL.
    pub store: StoreSettings,
    pub listen: String,
    /// A model name from the manifest; `None` is the manifest's default.
    pub model: Option<String>,
    pub engine: EngineChoice,
    /// Threads that read requests and do everything but the model run. At
    /// least `queue_capacity + inference_workers + 1`, so that a full queue
    /// is reached; the rest answer at once while it is full.
    pub http_workers: usize,
    /// Threads that run the model (each run already uses every core).
    pub inference_workers: usize,
    /// Requests that may wait their turn before new ones get 503.
    pub queue_capacity: usize,
    /// Bytes of uploads held at once; a request waits to read its body
    /// until it fits (one always does).
    pub upload_buffer: u64,
    /// The most pixels a photo may decode to (`image_too_large` past it).
    pub max_pixels: u64,
    /// Bytes the requests at work may hold at once beyond the idle server,
    /// each reserved at its peak before its photo is decoded
    /// (`pipeline::memory`); `u64::MAX` where no board or setting bounds it.
    pub memory_budget: u64,
    /// Read and write timeout of every client socket.
    pub socket_timeout: Duration,
    /// How long a client has to send a request head whole, however slowly
    /// its bytes come.
    pub head_timeout: Duration,
    /// Connections open at once, in all and from one client address.
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// HTTPS beside (or instead of) plain HTTP; `None`: plain HTTP only.
    pub tls: Option<TlsSettings>,
    /// Names the dashboard answers to besides the machine's own.
    pub allowed_hosts: Vec<String>,
    /// How long SIGTERM waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Where Linux reports temperatures (the status page's CPU temperature).
    pub thermal_dir: PathBuf,
    pub led: LedConfig,
    pub mdns: MdnsConfig,
    /// The board found at start and the defaults it gave (`None`: not
    /// asked, as in tests).
    pub board: Option<BoardFound>,
    /// Why the engine is not the configured one, when it is not.
    pub engine_note: Option<String>,
    /// The models a load of was killed for memory (`engine::killed`), and
    /// what this start serves instead; `cutout serve` finds them.
    pub killed_models: Vec<String>,
    pub memory_note: Option<String>,
    pub pipeline: PipelineSettings,
    /// The networks `image_url` and `bg_image_url` may be fetched from;
    /// empty, neither is fetched.
    pub fetch_allow: Vec<ipnet::IpNet>,
    pub button: ButtonConfig,
    /// The account a booth approved by the button joins.
    pub pairing_account: Option<String>,
    pub pairing_expire_seconds: i64,
    pub setup_console: Option<PathBuf>,
    /// Backups on a schedule; `None`: only when asked.
    pub backup: Option<BackupSchedule>,
}

const DEFAULT_UPLOAD_BUFFER_MIB: u64 = 160;

/// The most megapixels a photo may have: the API's limit, which
/// `server.max_megapixels` may only lower.
pub const MAX_MEGAPIXELS: u64 = 50;

/// The board found at start, as the log and the status page name it.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardFound {
    /// The board and its memory and cores.
    pub description: String,
    /// The defaults it gave, in words.
    pub defaults: String,
    /// Whether IS-Net fits its memory beside the configured model.
    pub isnet_fits: bool,
}

/// The library that runs the models. tract is compiled in; ONNX Runtime is
/// faster but needs its library (`make onnxruntime`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    #[default]
    Tract,
    Onnxruntime,
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Tract => "tract",
            EngineKind::Onnxruntime => "onnxruntime",
        })
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<EngineKind, String> {
        match s {
            "tract" => Ok(EngineKind::Tract),
            "onnxruntime" => Ok(EngineKind::Onnxruntime),
            _ => Err(format!("{s:?} is not an engine (tract, onnxruntime)")),
        }
    }
}

/// Which engine runs the models, and where ONNX Runtime's library is.
#[derive(Debug, Clone, Default)]
pub struct EngineChoice {
    pub kind: EngineKind,
    /// `None`: the manifest's file in the models directory.
    pub onnxruntime_library: Option<PathBuf>,
}

/// Where the store is: `None` is the SQLite file in the data directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreSettings {
    /// `postgres://…`; its password, if any, may come from `password_file`.
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// The `[led]` table of the configuration file (led/ drives it).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedConfig {
    /// `none` (the default), `sysfs` or `gpio`.
    pub backend: Option<String>,
    /// The BCM number of the pin, for `gpio`.
    pub gpio_pin: Option<u8>,
    /// For `gpio`: the LED lights when the pin is low.
    pub active_low: Option<bool>,
    /// For `sysfs`: the LED's directory.
    pub sysfs_path: Option<PathBuf>,
    /// What an idle appliance shows: `off` (the default) or `dim`.
    pub idle: Option<IdleLight>,
}

/// `[led] idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleLight {
    Off,
    Dim,
}

impl LedConfig {
    pub fn over(self, lower: LedConfig) -> LedConfig {
        LedConfig {
            backend: self.backend.or(lower.backend),
            gpio_pin: self.gpio_pin.or(lower.gpio_pin),
            active_low: self.active_low.or(lower.active_low),
            sysfs_path: self.sysfs_path.or(lower.sysfs_path),
            idle: self.idle.or(lower.idle),
        }
    }
}

/// The `[mdns]` table of the configuration file (discovery.rs announces).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdnsConfig {
    /// Announce the appliance (the default); `false` turns it off.
    pub enabled: Option<bool>,
    /// The instance name booths show; default "cutout on HOSTNAME".
    pub name: Option<String>,
    /// Multicast DNS's port; tests pick another than 5353.
    pub port: Option<u16>,
}

impl MdnsConfig {
    pub fn over(self, lower: MdnsConfig) -> MdnsConfig {
        MdnsConfig {
            enabled: self.enabled.or(lower.enabled),
            name: self.name.or(lower.name),
            port: self.port.or(lower.port),
        }
    }
}

/// The `[button]` table: a push button that proves someone stands at the
/// board (button.rs reads it).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ButtonConfig {
    /// The BCM number of a pin with a button to ground.
    pub gpio_pin: Option<u8>,
    /// A file that reads `1` while the button is pressed (a sysfs GPIO's
    /// `value`).
    pub value_file: Option<PathBuf>,
}

/// The `[pairing]` table: booths asking for a key (pairing.rs).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairingConfig {
    /// The account a booth approved by the button joins; unset, the only
    /// account when there is exactly one.
    pub account: Option<String>,
    /// How long a request waits for the operator.
    pub expire_seconds: Option<u32>,
}

/// The `[setup]` table: where a new appliance shows its setup code.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupConfig {
    /// The board's console (`/dev/tty1`: the screen plugged into it).
    pub console: Option<PathBuf>,
}

/// The `[backup]` table: a backup every `every_hours` into `dir` (a USB
/// stick), the newest `keep` kept.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupConfig {
    pub dir: Option<PathBuf>,
    /// The passphrase the backups are encrypted with: its first line
    /// (`backup::passphrase_in`).
    pub passphrase_file: Option<PathBuf>,
    pub every_hours: Option<f64>,
    pub keep: Option<usize>,
}

/// `[backup]` with its defaults filled in (backup/schedule.rs runs it).
#[derive(Debug, Clone, PartialEq)]
pub struct BackupSchedule {
    pub dir: PathBuf,
    /// Read at each backup, so that the passphrase is not held in memory.
    pub passphrase_file: PathBuf,
    pub every: Duration,
    pub keep: usize,
}

/// HTTPS: where it listens, its certificate, and whether plain HTTP stays.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    pub listen: String,
    /// The operator's own certificate chain and key (PEM); `None`: the one
    /// made on first start in `data_dir/tls`.
    pub certificate: Option<(PathBuf, PathBuf)>,
    /// Plain HTTP on `listen` too (the API only: the dashboard redirects).
    pub plain_http: bool,
}

/// HTTP workers beyond those a full queue keeps busy: they answer the
/// dashboard, health checks and refusals while the queue is full.
const SPARE_HTTP_WORKERS: usize = 8;

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_config(Config::default()).expect("the defaults are valid")
    }
}

/// One layer of configuration, as the file spells it.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub models_dir: Option<PathBuf>,
    pub model: Option<String>,
    pub engine: Option<EngineKind>,
    #[serde(default)]
    pub onnxruntime: OnnxRuntimeConfig,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub led: LedConfig,
    #[serde(default)]
    pub mdns: MdnsConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub dashboard: DashboardConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub pipeline: PipelineConfig,
    #[serde(default)]
    pub fetch: FetchConfig,
    #[serde(default)]
    pub button: ButtonConfig,
    #[serde(default)]
    pub pairing: PairingConfig,
    #[serde(default)]
    pub setup: SetupConfig,
    #[serde(default)]
    pub backup: BackupConfig,
}

/// The `[fetch]` table: where remove.bg's `image_url` and `bg_image_url`
/// may be fetched from.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchConfig {
    /// CIDRs (`192.168.1.0/24`, `10.0.0.5/32`, `fd00::/8`); the
    /// environment's `CUTOUT_FETCH_ALLOW` separates them with commas.
    pub allow: Option<Vec<String>>,
}

/// The `[pipeline]` table: how long `type=auto` may take on this board.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Seconds one photo (`bench_photo`) may take: `type=auto` serves the
    /// best rung the board's measurement puts within it.
    pub budget_seconds: Option<f64>,
    /// The photo the board is measured with; absent, a built-in 12 MP one.
    pub bench_photo: Option<PathBuf>,
    /// Measure the board in the background the first time the server is
    /// idle with no measurement in the data directory.
    pub bench_when_idle: Option<bool>,
}

/// `[pipeline]` with its defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSettings {
    pub budget_seconds: f64,
    pub bench_photo: Option<PathBuf>,
    pub bench_when_idle: bool,
}

/// A booth guest waits for their cut-out at the screen.
pub const DEFAULT_BUDGET_SECONDS: f64 = 4.0;

/// The `[store]` table: absent, the SQLite file in the data directory.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user@host:port/database`: a PostgreSQL server shared by
    /// several appliances.
    pub url: Option<String>,
    /// A file holding the PostgreSQL password, so that it is in neither the
    /// unit nor the environment.
    pub password_file: Option<PathBuf>,
}

/// The `[tls]` table.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub listen: Option<String>,
    pub certificate: Option<PathBuf>,
    pub private_key: Option<PathBuf>,
    pub plain_http: Option<bool>,
}

/// The `[dashboard]` table.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardConfig {
    pub allowed_hosts: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnnxRuntimeConfig {
    pub library: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub queue_capacity: Option<usize>,
    pub upload_buffer_mib: Option<u64>,
    pub max_megapixels: Option<u64>,
    pub memory_budget_mib: Option<u64>,
    pub inference_workers: Option<usize>,
    pub socket_timeout_secs: Option<u64>,
    pub head_timeout_secs: Option<u64>,
    pub max_connections: Option<usize>,
    pub max_connections_per_address: Option<usize>,
    pub shutdown_grace_secs: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    #[error("{0}: {1}")]
    File(PathBuf, String),
    #[error("environment variable {0}: {1}")]
    Env(String, String),
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Parses the file's text. Errors carry the line and column.
    pub fn parse_str(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())
    }

    /// Reads `path`; with `required` false a missing file is an empty layer.
    pub fn read(path: &Path, required: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse_str(&text).map_err(|e| ConfigError::File(path.to_owned(), e)),
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Config::default())
            }
            Err(e) => Err(ConfigError::Read(path.to_owned(), e)),
        }
    }

    /// The layer made of `CUTOUT_*` variables: `CUTOUT_LISTEN` is `listen`,
    /// `CUTOUT_SERVER_QUEUE_CAPACITY` is `queue_capacity` in `[server]`.
    /// `skip` names variables that are not settings (`CUTOUT_CONFIG`).
    pub fn from_env(
        vars: impl IntoIterator<Item = (String, String)>,
        skip: &[&str],
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, raw) in vars {
            let Some(key) = name.strip_prefix("CUTOUT_") else {
                continue;
            };
            if skip.contains(&name.as_str()) {
                continue;
            }
            let key = key.to_ascii_lowercase();
            let mut table = toml::Table::new();
            match SECTIONS
                .iter()
                .find_map(|s| Some((*s, key.strip_prefix(&format!("{s}_"))?)))
            {
                Some((section, key)) => {
                    let value = match LISTS.contains(&format!("{section}_{key}").as_str()) {
                        true => toml::Value::Array(
                            raw.split(',')
                                .map(str::trim)
                                .filter(|item| !item.is_empty())
                                .map(|item| toml::Value::String(item.to_owned()))
                                .collect(),
                        ),
                        false => env_value(&raw),
                    };
                    let mut inner = toml::Table::new();
                    inner.insert(key.to_owned(), value);
                    table.insert(section.to_owned(), toml::Value::Table(inner));
                }
                None => {
                    table.insert(key, env_value(&raw));
                }
            }
            // One variable at a time, so that an error names it.
            let single = Config::deserialize(table)
                .map_err(|e| ConfigError::Env(name.clone(), e.message().to_owned()))?;
            config = single.over(config);
        }
        Ok(config)
    }

    /// `self` over `lower`: each field is `self`'s if set, else `lower`'s.
    pub fn over(self, lower: Config) -> Config {
        Config {
            listen: self.listen.or(lower.listen),
            data_dir: self.data_dir.or(lower.data_dir),
            models_dir: self.models_dir.or(lower.models_dir),
            model: self.model.or(lower.model),
            engine: self.engine.or(lower.engine),
            onnxruntime: OnnxRuntimeConfig {
                library: self.onnxruntime.library.or(lower.onnxruntime.library),
            },
            server: ServerConfig {
                queue_capacity: self.server.queue_capacity.or(lower.server.queue_capacity),
                upload_buffer_mib: self
                    .server
                    .upload_buffer_mib
                    .or(lower.server.upload_buffer_mib),
                max_megapixels: self.server.max_megapixels.or(lower.server.max_megapixels),
                memory_budget_mib: self
                    .server
                    .memory_budget_mib
                    .or(lower.server.memory_budget_mib),
                inference_workers: self
                    .server
                    .inference_workers
                    .or(lower.server.inference_workers),
                socket_timeout_secs: self
                    .server
                    .socket_timeout_secs
                    .or(lower.server.socket_timeout_secs),
                head_timeout_secs: self
                    .server
                    .head_timeout_secs
                    .or(lower.server.head_timeout_secs),
                max_connections: self.server.max_connections.or(lower.server.max_connections),
                max_connections_per_address: self
                    .server
                    .max_connections_per_address
                    .or(lower.server.max_connections_per_address),
                shutdown_grace_secs: self
                    .server
                    .shutdown_grace_secs
                    .or(lower.server.shutdown_grace_secs),
            },
            led: self.led.over(lower.led),
            mdns: self.mdns.over(lower.mdns),
            tls: TlsConfig {
                listen: self.tls.listen.or(lower.tls.listen),
                certificate: self.tls.certificate.or(lower.tls.certificate),
                private_key: self.tls.private_key.or(lower.tls.private_key),
                plain_http: self.tls.plain_http.or(lower.tls.plain_http),
            },
            dashboard: DashboardConfig {
                allowed_hosts: self
                    .dashboard
                    .allowed_hosts
                    .or(lower.dashboard.allowed_hosts),
            },
            store: StoreConfig {
                url: self.store.url.or(lower.store.url),
                password_file: self.store.password_file.or(lower.store.password_file),
            },
            pipeline: PipelineConfig {
                budget_seconds: self
                    .pipeline
                    .budget_seconds
                    .or(lower.pipeline.budget_seconds),
                bench_photo: self.pipeline.bench_photo.or(lower.pipeline.bench_photo),
                bench_when_idle: self
                    .pipeline
                    .bench_when_idle
                    .or(lower.pipeline.bench_when_idle),
            },
            fetch: FetchConfig {
                allow: self.fetch.allow.or(lower.fetch.allow),
            },
            button: ButtonConfig {
                gpio_pin: self.button.gpio_pin.or(lower.button.gpio_pin),
                value_file: self.button.value_file.or(lower.button.value_file),
            },
            pairing: PairingConfig {
                account: self.pairing.account.or(lower.pairing.account),
                expire_seconds: self.pairing.expire_seconds.or(lower.pairing.expire_seconds),
            },
            setup: SetupConfig {
                console: self.setup.console.or(lower.setup.console),
            },
            backup: BackupConfig {
                dir: self.backup.dir.or(lower.backup.dir),
                passphrase_file: self.backup.passphrase_file.or(lower.backup.passphrase_file),
                every_hours: self.backup.every_hours.or(lower.backup.every_hours),
                keep: self.backup.keep.or(lower.backup.keep),
            },
        }
    }
}

/// The file's tables; an environment variable starting with one of these
/// (and `_`) names a key in it.
const SECTIONS: &[&str] = &[
    "server",
    "onnxruntime",
    "led",
    "mdns",
    "tls",
    "dashboard",
    "store",
    "pipeline",
    "fetch",
    "button",
    "pairing",
    "setup",
    "backup",
];

/// Keys whose environment variable is a comma-separated list.
const LISTS: &[&str] = &["dashboard_allowed_hosts", "fetch_allow"];

/// An environment value as TOML if it reads as a number or boolean, else
/// as a string (so `CUTOUT_LISTEN=0.0.0.0:8080` needs no quotes).
fn env_value(raw: &str) -> toml::Value {
    if let Ok(n) = raw.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    // "4.5", not "inf" or "1e3": those stay strings.
    let decimal = raw.chars().all(|c| c.is_ascii_digit() || c == '.');
    if let (true, Ok(x)) = (decimal, raw.parse::<f64>()) {
        return toml::Value::Float(x);
    }
    match raw {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(raw.to_owned()),
    }
}

impl Settings {
    /// Whether `type=general` may load its own model beside the configured
    /// one: not where the board's memory has no room for it.
    pub fn general_fits(&self) -> bool {
        self.board.as_ref().is_none_or(|board| board.isnet_fits)
    }

    pub fn from_config(config: Config) -> Result<Settings, ConfigError> {
        let server = config.server;
        let queue_capacity = server.queue_capacity.unwrap_or(64);
        let inference_workers = server.inference_workers.unwrap_or(1);
        // 16 uploads of the largest size: with IS-Net on tract, 50 of them at
        // once peak under 1.5 GiB (BENCHMARKS.md, "Upload buffer").
        let upload_buffer_mib = server
            .upload_buffer_mib
            .unwrap_or(DEFAULT_UPLOAD_BUFFER_MIB);
        if upload_buffer_mib == 0 {
            return Err(ConfigError::Invalid(
                "server.upload_buffer_mib must be at least 1".into(),
            ));
        }
        if inference_workers == 0 {
            return Err(ConfigError::Invalid(
                "server.inference_workers must be at least 1".into(),
            ));
        }
        let seconds = |value: Option<u64>, default: u64, name: &str| match value.unwrap_or(default)
        {
            0 => Err(ConfigError::Invalid(format!(
                "server.{name} must be at least 1"
            ))),
            s => Ok(Duration::from_secs(s)),
        };
        let at_least_one =
            |value: Option<usize>, default: usize, name: &str| match value.unwrap_or(default) {
                0 => Err(ConfigError::Invalid(format!(
                    "server.{name} must be at least 1"
                ))),
                n => Ok(n),
            };
        let tls = config.tls;
        let certificate = match (tls.certificate, tls.private_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid(
                    "tls.certificate and tls.private_key go together: set both or neither".into(),
                ))
            }
        };
        let plain_http = tls.plain_http.unwrap_or(true);
        if !plain_http && tls.listen.is_none() {
            return Err(ConfigError::Invalid(
                "tls.plain_http = false needs tls.listen: nothing would be served".into(),
            ));
        }
        let budget_seconds = config
            .pipeline
            .budget_seconds
            .unwrap_or(DEFAULT_BUDGET_SECONDS);
        if !(budget_seconds > 0.0 && budget_seconds.is_finite()) {
            return Err(ConfigError::Invalid(
                "pipeline.budget_seconds must be a number of seconds over 0".into(),
            ));
        }
        let pipeline = PipelineSettings {
            budget_seconds,
            bench_photo: config.pipeline.bench_photo,
            bench_when_idle: config.pipeline.bench_when_idle.unwrap_or(true),
        };
        let fetch_allow = config
            .fetch
            .allow
            .unwrap_or_default()
            .iter()
            .map(|cidr| {
                let cidr = cidr.trim();
                // A bare address is the network of that address alone.
                let bare = cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from);
                bare.or_else(|_| cidr.parse::<ipnet::IpNet>()).map_err(|_| {
                    ConfigError::Invalid(format!(
                        "fetch.allow: {cidr:?} is not a network such as 192.168.1.0/24 or an address such as 10.0.0.5"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let store = config.store;
        if let Some(url) = &store.url {
            if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                return Err(ConfigError::Invalid(
                    "store.url must start with postgres:// (absent: SQLite in the data directory)"
                        .into(),
                ));
            }
        } else if store.password_file.is_some() {
            return Err(ConfigError::Invalid(
                "store.password_file needs store.url: SQLite has no password".into(),
            ));
        }
        Ok(Settings {
            config_file: DEFAULT_CONFIG_FILE.into(),
            data_dir: config.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            store: StoreSettings {
                url: store.url,
                password_file: store.password_file,
            },
            models_dir: config
                .models_dir
                .unwrap_or_else(|| DEFAULT_MODELS_DIR.into()),
            listen: config.listen.unwrap_or_else(|| "127.0.0.1:8080".into()),
            model: config.model,
            engine: EngineChoice {
                kind: config.engine.unwrap_or_default(),
                onnxruntime_library: config.onnxruntime.library,
            },
            http_workers: queue_capacity + inference_workers + 1 + SPARE_HTTP_WORKERS,
            inference_workers,
            queue_capacity,
            upload_buffer: upload_buffer_mib * 1024 * 1024,
            max_pixels: match server.max_megapixels.unwrap_or(MAX_MEGAPIXELS) {
                mp @ 1..=MAX_MEGAPIXELS => mp * 1_000_000,
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "server.max_megapixels must be from 1 to {MAX_MEGAPIXELS}"
                    )))
                }
            },
            memory_budget: match server.memory_budget_mib {
                None => u64::MAX,
                Some(0) => {
                    return Err(ConfigError::Invalid(
                        "server.memory_budget_mib must be at least 1".into(),
                    ))
                }
                Some(mib) => mib.saturating_mul(1024 * 1024),
            },
            socket_timeout: seconds(server.socket_timeout_secs, 30, "socket_timeout_secs")?,
            head_timeout: seconds(server.head_timeout_secs, 10, "head_timeout_secs")?,
            // Under the unit's 4,096 open files with room to spare: one
            // descriptor a connection. 64 from one address: a Business
            // account's 50 concurrent calls from one booth.
            max_connections: at_least_one(server.max_connections, 512, "max_connections")?,
            max_connections_per_address: at_least_one(
                server.max_connections_per_address,
                64,
                "max_connections_per_address",
            )?,
            tls: tls.listen.map(|listen| TlsSettings {
                listen,
                certificate,
                plain_http,
            }),
            allowed_hosts: config.dashboard.allowed_hosts.unwrap_or_default(),
            shutdown_grace: seconds(server.shutdown_grace_secs, 60, "shutdown_grace_secs")?,
            thermal_dir: "/sys/class/thermal".into(),
            led: config.led,
            mdns: config.mdns,
            board: None,
            engine_note: None,
            killed_models: Vec::new(),
            memory_note: None,
            pipeline,
            fetch_allow,
            button: config.button,
            pairing_account: config.pairing.account,
            pairing_expire_seconds: match config.pairing.expire_seconds {
                None => 120,
                Some(0) => {
                    return Err(ConfigError::Invalid(
                        "pairing.expire_seconds must be at least 1".into(),
                    ))
                }
                Some(s) => s.into(),
            },
            setup_console: config.setup.console,
            backup: backup_schedule(config.backup)?,
        })
    }
}

fn backup_schedule(config: BackupConfig) -> Result<Option<BackupSchedule>, ConfigError> {
    let Some(dir) = config.dir else {
        return Ok(None);
    };
    let invalid = |why: &str| Err(ConfigError::Invalid(format!("backup.{why}")));
    let Some(passphrase_file) = config.passphrase_file else {
        return invalid("passphrase_file must be set with backup.dir");
    };
    let every_hours = config.every_hours.unwrap_or(24.0);
    if !(every_hours > 0.0 && every_hours <= 24.0 * 365.0) {
        return invalid("every_hours must be more than 0 and at most a year's");
    }
    let keep = config.keep.unwrap_or(7);
    if keep == 0 {
        return invalid("keep must be at least 1");
    }
    Ok(Some(BackupSchedule {
        dir,
        passphrase_file,
        every: Duration::from_secs_f64(every_hours * 3600.0),
        keep,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::from_env(vars, &["CUTOUT_CONFIG"])
    }

    #[test]
    fn the_command_line_beats_the_environment_which_beats_the_file() {
        let file = Config::parse_str(
            "listen = \"0.0.0.0:80\"\nmodel = \"modnet\"\ndata_dir = \"/var/lib/cutout\"\n[server]\nqueue_capacity = 8\n",
        )
        .unwrap();
        let environment = env(&[
            ("CUTOUT_MODEL", "u2netp"),
            ("CUTOUT_LISTEN", "0.0.0.0:81"),
            ("CUTOUT_LED_IDLE", "dim"),
            ("HOME", "/root"),
        ])
        .unwrap();
        let command_line = Config {
            listen: Some("127.0.0.1:82".into()),
            ..Config::default()
        };
        let settings = Settings::from_config(command_line.over(environment.over(file))).unwrap();
        assert_eq!(settings.listen, "127.0.0.1:82");
        assert_eq!(settings.model.as_deref(), Some("u2netp"));
        assert_eq!(settings.data_dir, PathBuf::from("/var/lib/cutout"));
        assert_eq!(settings.queue_capacity, 8);
        assert_eq!(settings.http_workers, 8 + 1 + 1 + SPARE_HTTP_WORKERS);
        assert_eq!(
            settings.models_dir,
            PathBuf::from("./models"),
            "the default"
        );
        assert_eq!(settings.led.idle, Some(IdleLight::Dim));
    }

    #[test]
    fn the_engine_comes_from_the_file_or_the_environment_and_defaults_to_tract() {
        assert_eq!(Settings::default().engine.kind, EngineKind::Tract);
        let file = Config::parse_str(
            "engine = \"onnxruntime\"\n[onnxruntime]\nlibrary = \"/opt/ort.so\"\n",
        )
        .unwrap();
        let settings = Settings::from_config(file.clone()).unwrap();
        assert_eq!(settings.engine.kind, EngineKind::Onnxruntime);
        assert_eq!(
            settings.engine.onnxruntime_library,
            Some(PathBuf::from("/opt/ort.so"))
        );
        let environment = env(&[
            ("CUTOUT_ENGINE", "tract"),
            ("CUTOUT_ONNXRUNTIME_LIBRARY", "/lib/o.so"),
        ])
        .unwrap();
        let settings = Settings::from_config(environment.over(file)).unwrap();
        assert_eq!(settings.engine.kind, EngineKind::Tract);
        assert_eq!(
            settings.engine.onnxruntime_library,
            Some(PathBuf::from("/lib/o.so"))
        );
        let error = Config::parse_str("engine = \"torch\"\n").unwrap_err();
        assert!(error.contains("line 1"), "{error}");
        assert!("torch".parse::<EngineKind>().is_err());
    }

    #[test]
    fn an_unknown_key_in_the_file_is_an_error_with_its_line() {
        let error = Config::parse_str(
            "listen = \"x\"\n\n[server]\nqueue_capacity = 1\nqueue_capcity = 2\n",
        )
        .unwrap_err();
        assert!(error.contains("line 5"), "{error}");
        assert!(error.contains("unknown field `queue_capcity`"), "{error}");
        let error = Config::parse_str("modle = \"isnet\"\n").unwrap_err();
        assert!(error.contains("line 1"), "{error}");
        let error = Config::parse_str("[server]\nqueue_capacity = \"many\"\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
    }

    #[test]
    fn environment_variables_map_to_keys_and_unknown_ones_are_named() {
        let config = env(&[
            ("CUTOUT_SERVER_SOCKET_TIMEOUT_SECS", "5"),
            ("CUTOUT_CONFIG", "/x.toml"),
        ])
        .unwrap();
        assert_eq!(config.server.socket_timeout_secs, Some(5));
        let error = env(&[("CUTOUT_LISTN", "x")]).unwrap_err().to_string();
        assert!(error.contains("CUTOUT_LISTN"), "{error}");
        let error = env(&[("CUTOUT_SERVER_QUEUE_CAPACITY", "lots")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("CUTOUT_SERVER_QUEUE_CAPACITY"), "{error}");
    }

    #[test]
    fn a_missing_default_file_is_empty_and_a_missing_named_one_is_an_error() {
        let nowhere = Path::new("/nonexistent/cutout.toml");
        assert_eq!(Config::read(nowhere, false).unwrap(), Config::default());
        assert!(Config::read(nowhere, true).is_err());
    }

    #[test]
    fn fetch_allows_nothing_unless_networks_are_listed_in_the_file_or_environment() {
        assert!(Settings::default().fetch_allow.is_empty());
        let file = Config::parse_str("[fetch]\nallow = [\"192.168.1.0/24\", \"10.0.0.5/32\"]\n");
        let allowed = Settings::from_config(file.unwrap()).unwrap().fetch_allow;
        assert_eq!(allowed.len(), 2);
        assert!(allowed[0].contains(&"192.168.1.20".parse::<std::net::IpAddr>().unwrap()));
        let from_env = env(&[("CUTOUT_FETCH_ALLOW", "192.168.1.0/24, fd00::/8")]).unwrap();
        assert_eq!(
            Settings::from_config(from_env).unwrap().fetch_allow.len(),
            2
        );
        let hosts = env(&[("CUTOUT_DASHBOARD_ALLOWED_HOSTS", "booth.lan,cutout.lan")]).unwrap();
        assert_eq!(
            Settings::from_config(hosts).unwrap().allowed_hosts,
            ["booth.lan", "cutout.lan"]
        );
        let one = env(&[("CUTOUT_FETCH_ALLOW", "10.0.0.5")]).unwrap();
        assert_eq!(
            Settings::from_config(one).unwrap().fetch_allow,
            ["10.0.0.5/32".parse::<ipnet::IpNet>().unwrap()]
        );
        let bad = env(&[("CUTOUT_FETCH_ALLOW", "192.168.1.300/24")]).unwrap();
        let error = Settings::from_config(bad).err().unwrap().to_string();
        assert!(error.contains("fetch.allow"), "{error}");
    }

    #[test]
    fn the_packaged_file_parses_with_every_commented_option_turned_on() {
        let packaged = include_str!("../packaging/cutout.toml");
        let config = Config::parse_str(packaged).unwrap();
        assert_eq!(config.data_dir, Some(PathBuf::from("/var/lib/cutout")));
        let all_on: String = packaged
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(option) if option.contains(" = ") && !option.starts_with(' ') => option,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(all_on.matches(" = ").count() > 10);
        let config = Config::parse_str(&all_on).unwrap();
        Settings::from_config(config).unwrap();
    }

    #[test]
    fn the_store_is_sqlite_unless_a_postgres_url_is_set_in_the_file_or_environment() {
        assert_eq!(Settings::default().store, StoreSettings::default());
        let file = Config::parse_str(
            "[store]\nurl = \"postgres://cutout@db.lan/cutout\"\npassword_file = \"/etc/cutout/pw\"\n",
        )
        .unwrap();
        let env = Config::from_env(
            [(
                "CUTOUT_STORE_URL".to_owned(),
                "postgres://cutout@other/cutout".to_owned(),
            )],
            &[],
        )
        .unwrap();
        let store = Settings::from_config(env.over(file)).unwrap().store;
        assert_eq!(store.url.as_deref(), Some("postgres://cutout@other/cutout"));
        assert_eq!(store.password_file, Some(PathBuf::from("/etc/cutout/pw")));

        for (text, names) in [
            (
                "[store]\nurl = \"mysql://root:hunter2@db/cutout\"\n",
                "postgres://",
            ),
            ("[store]\npassword_file = \"/pw\"\n", "store.url"),
        ] {
            let error = Settings::from_config(Config::parse_str(text).unwrap())
                .err()
                .unwrap()
                .to_string();
            assert!(error.contains(names), "{error}");
            assert!(!error.contains("hunter2"), "never the password: {error}");
        }
    }

    #[test]
    fn https_is_off_unless_listened_for_and_its_key_goes_with_its_certificate() {
        assert_eq!(Settings::default().tls, None);
        let config = Config::parse_str("[tls]\nlisten = \"0.0.0.0:8443\"\n").unwrap();
        let tls = Settings::from_config(config).unwrap().tls.unwrap();
        assert_eq!(
            (tls.listen.as_str(), tls.plain_http),
            ("0.0.0.0:8443", true)
        );
        assert_eq!(tls.certificate, None);
        let config =
            Config::parse_str("[tls]\nlisten = \"x\"\ncertificate = \"/c.pem\"\n").unwrap();
        let error = Settings::from_config(config).err().unwrap().to_string();
        assert!(error.contains("tls.private_key"), "{error}");
        let config = Config::parse_str("[tls]\nplain_http = false\n").unwrap();
        let error = Settings::from_config(config).err().unwrap().to_string();
        assert!(error.contains("tls.listen"), "{error}");
        let environment = env(&[("CUTOUT_TLS_LISTEN", "127.0.0.1:8443")]).unwrap();
        assert_eq!(environment.tls.listen.as_deref(), Some("127.0.0.1:8443"));
    }

    #[test]
    fn the_time_budget_is_4_seconds_unless_set_and_must_be_positive() {
        let pipeline = Settings::default().pipeline;
        assert_eq!(pipeline.budget_seconds, DEFAULT_BUDGET_SECONDS);
        assert!(pipeline.bench_when_idle && pipeline.bench_photo.is_none());
        let file = Config::parse_str(
            "[pipeline]\nbudget_seconds = 6\nbench_photo = \"/srv/booth.jpg\"\nbench_when_idle = false\n",
        )
        .unwrap();
        let set = Settings::from_config(file.clone()).unwrap().pipeline;
        assert_eq!(set.budget_seconds, 6.0);
        assert_eq!(set.bench_photo, Some(PathBuf::from("/srv/booth.jpg")));
        assert!(!set.bench_when_idle);
        let over = env(&[("CUTOUT_PIPELINE_BUDGET_SECONDS", "2.5")]).unwrap();
        let both = Settings::from_config(over.over(file)).unwrap().pipeline;
        assert_eq!(both.budget_seconds, 2.5);
        for bad in ["0", "-1", "nan"] {
            let config = Config::parse_str(&format!("[pipeline]\nbudget_seconds = {bad}\n"));
            let refused = config.map(|c| Settings::from_config(c).is_err());
            assert!(refused.unwrap_or(true), "{bad}");
        }
        // Not a number: named.
        let error = env(&[("CUTOUT_PIPELINE_BUDGET_SECONDS", "inf")]).unwrap_err();
        assert!(error.to_string().contains("CUTOUT_PIPELINE_BUDGET_SECONDS"));
    }

    #[test]
    fn scheduled_backups_need_a_passphrase_file_and_default_to_daily_keeping_seven() {
        assert_eq!(Settings::default().backup, None);
        let file = "[backup]\ndir = \"/media/usb\"\npassphrase_file = \"/etc/cutout/p\"\n";
        let daily = Settings::from_config(Config::parse_str(file).unwrap()).unwrap();
        let daily = daily.backup.unwrap();
        assert_eq!((daily.every, daily.keep), (Duration::from_secs(86_400), 7));
        let set = env(&[
            ("CUTOUT_BACKUP_DIR", "/mnt/stick"),
            ("CUTOUT_BACKUP_PASSPHRASE_FILE", "/p"),
            ("CUTOUT_BACKUP_EVERY_HOURS", "0.5"),
            ("CUTOUT_BACKUP_KEEP", "3"),
        ]);
        let set = Settings::from_config(set.unwrap()).unwrap().backup.unwrap();
        assert_eq!(set.dir, PathBuf::from("/mnt/stick"));
        assert_eq!((set.every, set.keep), (Duration::from_secs(1800), 3));
        for bad in [
            "dir = \"/m\"",
            "dir = \"/m\"\npassphrase_file = \"/p\"\nkeep = 0",
            "dir = \"/m\"\npassphrase_file = \"/p\"\nevery_hours = 0",
        ] {
            let config = Config::parse_str(&format!("[backup]\n{bad}\n")).unwrap();
            let Err(error) = Settings::from_config(config) else {
                panic!("{bad}: accepted");
            };
            assert!(error.to_string().contains("backup."), "{bad}: {error}");
        }
    }

    #[test]
    fn zero_timeouts_workers_and_buffers_are_refused() {
        let config = Config::parse_str("[server]\ninference_workers = 0\n").unwrap();
        assert!(Settings::from_config(config).is_err());
        let config = Config::parse_str("[server]\nupload_buffer_mib = 0\n").unwrap();
        assert!(Settings::from_config(config).is_err());
        let config = Config::parse_str("[server]\nupload_buffer_mib = 64\n").unwrap();
        assert_eq!(
            Settings::from_config(config).unwrap().upload_buffer,
            64 << 20
        );
        let config = Config::parse_str("[server]\nsocket_timeout_secs = 0\n").unwrap();
        assert!(Settings::from_config(config).is_err());
        for zero in [
            "head_timeout_secs",
            "max_connections",
            "max_connections_per_address",
        ] {
            let config = Config::parse_str(&format!("[server]\n{zero} = 0\n")).unwrap();
            assert!(Settings::from_config(config).is_err(), "{zero}");
        }
    }
}
