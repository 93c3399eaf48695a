//! The command line: what each command and option means, and what each
//! command does. `main.rs` parses it and maps errors to exit codes.

use crate::board::{Board, Installed, Report};
use crate::clock::Clock;
use crate::config::{Config, Settings, DEFAULT_CONFIG_FILE, DEFAULT_DATA_DIR, DEFAULT_MODELS_DIR};
use crate::domain::{utc_date, utc_datetime, AccountName, KeyLabel, Month, SizeMode, SubjectType};
use crate::engine::{killed_for_memory, EngineKind, Manifest, OnnxRuntimeTrial};
use crate::imaging::Finish;
use crate::ladder;
use crate::pipeline::{Loader, Pipeline};
use crate::secrets::{check_password_policy, hash_password};
use crate::store;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser)]
#[command(
    version,
    about = "Background-removal appliance: POST a photo, get a transparent PNG cut-out"
)]
pub struct Cli {
    /// The configuration file [default: /etc/cutout/cutout.toml if it exists].
    #[arg(long, global = true, env = "CUTOUT_CONFIG")]
    config: Option<PathBuf>,
    /// Where the SQLite database lives [env: CUTOUT_DATA_DIR; default: ./data].
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Where the model files are (see `make models`) [env: CUTOUT_MODELS_DIR; default: ./models].
    #[arg(long, global = true)]
    models_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API.
    Serve {
        /// The address to serve on [env: CUTOUT_LISTEN; default: 127.0.0.1:8080].
        #[arg(long)]
        listen: Option<String>,
        /// A model from the manifest: isnet, isnet-int8, modnet, u2netp [env: CUTOUT_MODEL].
        #[arg(long)]
        model: Option<String>,
        /// tract (built in) or onnxruntime (faster; `make onnxruntime`) [env: CUTOUT_ENGINE; default: tract].
        #[arg(long)]
        engine: Option<EngineKind>,
        /// On an empty database, create account `demo` and print a key for it.
        #[arg(long)]
        demo: bool,
    },
    /// Manage accounts.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Show an account's usage this month, or correct it with `usage set`.
    #[command(args_conflicts_with_subcommands = true)]
    Usage {
        account: Option<String>,
        #[command(subcommand)]
        set: Option<UsageCommand>,
    },
    /// The operator's dashboard sign-in.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// The accounts database: SQLite in the data directory, or the
    /// PostgreSQL server several appliances share (`[store] url`).
    #[command(subcommand)]
    Store(StoreCommand),
    /// The HTTPS certificate.
    #[command(subcommand)]
    Tls(TlsCommand),
    /// The backdrops a booth's request may name (`backdrop`): a background
    /// and an optional overlay each, kept in the data directory. The
    /// dashboard's Backdrops page does the same.
    #[command(subcommand)]
    Backdrop(BackdropCommand),
    /// Save the accounts, keys, counts, operator password, HTTPS
    /// certificate, backdrops and configuration into FILE, encrypted with a
    /// passphrase (argon2id, XChaCha20-Poly1305): read from --passphrase-file, or typed twice. The
    /// service goes on serving meanwhile.
    Backup {
        file: PathBuf,
        #[arg(long)]
        passphrase_file: Option<PathBuf>,
    },
    /// Bring back what `backup` saved in FILE, so that booths paired before
    /// work unchanged. Stop the service first. Nothing changes if FILE is
    /// damaged, from a newer cutout or the passphrase is wrong. What it
    /// replaces is kept in DATA_DIR/replaced-by-restore; `--undo` puts that back.
    Restore {
        #[arg(required_unless_present = "undo")]
        file: Option<PathBuf>,
        #[arg(long)]
        passphrase_file: Option<PathBuf>,
        /// Replace the accounts this appliance already has.
        #[arg(long)]
        yes: bool,
        /// Put back what the last restore replaced (and keep what it restored).
        #[arg(long, conflicts_with = "file")]
        undo: bool,
    },
    /// Cut out images offline, without a key: `remove IN OUT.png`, or
    /// `remove IN... DIR` (each to DIR/<name>.png, the model loaded once).
    Remove {
        #[arg(required = true, num_args = 2..)]
        paths: Vec<PathBuf>,
        #[arg(long, default_value = "auto")]
        size: String,
        /// auto (the configured model), person or general.
        #[arg(long = "type", default_value = "auto")]
        subject: String,
        #[arg(long)]
        model: Option<String>,
        /// tract or onnxruntime [env: CUTOUT_ENGINE; default: tract].
        #[arg(long)]
        engine: Option<EngineKind>,
        /// Serve with this rung of the type's ladder: `type=auto`'s (see
        /// `cutout ladder`), or `type=person`'s, `median` or `alone`
        /// [default: the best, whatever its time].
        #[arg(long)]
        rung: Option<String>,
    },
    /// type=auto's ladder for the configured model and engine: each rung's
    /// multiply-adds, its seconds for a 12 MP photo (measured here by
    /// `cutout bench`, else estimated from published rates), its MAE on the
    /// dev sets against the peers that fit the same budget, and the rung
    /// that serves within the budget.
    Ladder {
        /// Estimate for this board, with its defaults where no model or
        /// engine is configured: Raspberry Pi 3, Raspberry Pi 4 or
        /// Raspberry Pi 5 [default: this board, measured where it has been].
        #[arg(long)]
        board: Option<String>,
        /// Seconds a photo may take [default: pipeline.budget_seconds].
        #[arg(long)]
        budget: Option<f64>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Time one 12 MP cut-out with each installed model on each engine, with
    /// its peak memory, and recommend a configuration for this board. The
    /// Status page shows the last result.
    Bench {
        /// The time budget for all of it: a measurement still running then
        /// is stopped, and those not yet started are skipped.
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        /// Also write the 12 MP photo it measures with here (a JPEG).
        #[arg(long)]
        save_photo: Option<PathBuf>,
    },
    /// One measurement of `bench`, in a process of its own.
    #[command(hide = true)]
    BenchOne {
        model: String,
        engine: EngineKind,
        photo: PathBuf,
        /// One rung of `type`'s ladder, every view of it, instead.
        #[arg(long)]
        rung: Option<String>,
        /// auto or person: whose ladder `rung` is.
        #[arg(long = "type", default_value = "auto")]
        subject: String,
        /// The process that measures: this one ends when it does.
        #[arg(long)]
        parent: Option<u32>,
    },
}

#[derive(Subcommand)]
enum AccountCommand {
    Create {
        name: String,
        #[arg(long)]
        plan: String,
    },
    List,
    SetPlan {
        name: String,
        plan: String,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Prints the new key alone on the last line; it is shown only this once.
    Create {
        account: String,
        #[arg(long, default_value = "")]
        label: String,
    },
    List {
        account: String,
    },
    Revoke {
        key_or_prefix: String,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Set the password of the dashboard's `admin`, read from stdin (not
    /// echoed on a terminal). Signs the operator out everywhere.
    SetPassword,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Bring the configured store's schema up to date (each start does too).
    Migrate,
    /// Copy one appliance's accounts, keys, monthly counts and operator
    /// password from its SQLite file into a PostgreSQL store. Running it
    /// again changes nothing; a count already there becomes the larger.
    Copy {
        /// sqlite:DIR, the data directory holding cutout.db.
        #[arg(long)]
        from: String,
        /// postgres://USER@HOST:PORT/DATABASE (the password from
        /// `[store] password_file` if set).
        #[arg(long)]
        to: String,
    },
}

#[derive(Subcommand)]
enum TlsCommand {
    /// Print the SHA-256 fingerprint of the certificate HTTPS serves, for
    /// a booth to pin.
    Fingerprint,
}

#[derive(Subcommand)]
enum BackdropCommand {
    /// Add a backdrop named NAME: a background image (JPG, PNG or WEBP) and
    /// an optional overlay (a PNG with transparency), at most 10 MB and 25
    /// megapixels each.
    Add {
        name: String,
        background: PathBuf,
        #[arg(long)]
        overlay: Option<PathBuf>,
    },
    /// Each backdrop's id, size and name.
    List,
    /// Delete the backdrop with this id (as `list` prints it).
    Remove { id: String },
}

#[derive(Subcommand)]
enum UsageCommand {
    /// Set this month's count (an operator's correction; it is logged).
    Set {
        account: String,
        #[arg(long)]
        count: u32,
    },
}

/// Settings from the command line over `CUTOUT_*` variables over the file.
fn settings(cli: &Cli) -> Result<Settings> {
    let config_file = cli
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE));
    let file = match &cli.config {
        Some(path) => Config::read(path, true)?,
        None => Config::read(DEFAULT_CONFIG_FILE.as_ref(), false)?,
    };
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let env = Config::from_env(vars, &["CUTOUT_CONFIG"])?;
    let (listen, model, engine) = match &cli.command {
        Command::Serve {
            listen,
            model,
            engine,
            ..
        } => (listen.clone(), model.clone(), *engine),
        Command::Remove { model, engine, .. } => (None, model.clone(), *engine),
        _ => (None, None, None),
    };
    let command_line = Config {
        listen,
        model,
        engine,
        data_dir: cli.data_dir.clone(),
        models_dir: cli.models_dir.clone(),
        ..Config::default()
    };
    let config = command_line.over(env.over(file));
    // `bench` times `type=auto`'s rungs as `serve` would serve them.
    let as_served = matches!(
        cli.command,
        Command::Serve { .. }
            | Command::Remove { .. }
            | Command::Bench { .. }
            | Command::Ladder { .. }
    );
    if !as_served {
        let mut settings = Settings::from_config(config)?;
        settings.config_file = config_file;
        return Ok(settings);
    }
    // What no layer set comes from the board.
    // A board only named has not measured itself: no report of its own.
    let (board, report) = match &cli.command {
        Command::Ladder {
            board: Some(name), ..
        } => (Board::named(name)?, None),
        _ => {
            let data_dir = config.data_dir.as_deref();
            let report = Report::load(data_dir.unwrap_or(Path::new(DEFAULT_DATA_DIR)));
            (Board::detect(), report)
        }
    };
    let models_dir = config
        .models_dir
        .clone()
        .unwrap_or_else(|| DEFAULT_MODELS_DIR.into());
    let installed = Installed::find(&models_dir, config.onnxruntime.library.as_deref());
    let defaults = board
        .defaults(&installed, config.engine)
        .follow(&board, report.as_ref());
    let mut settings = Settings::from_config(config.over(defaults.as_config()))?;
    settings.board = Some(defaults.found_on(&board));
    settings.config_file = config_file;
    if matches!(cli.command, Command::Serve { .. }) {
        fall_back_from_a_crashing_onnxruntime(&mut settings);
        fall_back_from_loads_killed_for_memory(&mut settings);
    }
    Ok(settings)
}

/// Where ONNX Runtime crashed the last starts, this one serves with tract
/// (engine/trial.rs); an int8 model whose tract file is not installed, with
/// the f32 one it was made from.
fn fall_back_from_a_crashing_onnxruntime(settings: &mut Settings) {
    if settings.engine.kind != EngineKind::Onnxruntime {
        return;
    }
    let Some(why) = OnnxRuntimeTrial::new(&settings.data_dir).refusal() else {
        return;
    };
    log::error!("{why}");
    settings.engine.kind = EngineKind::Tract;
    let manifest = Manifest::builtin();
    if let Some(spec) = manifest.model(settings.model.as_deref()) {
        if spec.int8 && !spec.installed_for(EngineKind::Tract, &settings.models_dir) {
            settings.model = spec.variant_of.clone();
        }
    }
    settings.engine_note = Some(why);
}

/// Where a load of a model was killed for memory (engine/killed.rs), this
/// start and the next serve without it; where it is `type=auto`'s, with
/// the smallest model on tract, which a board too small for IS-Net gets.
fn fall_back_from_loads_killed_for_memory(settings: &mut Settings) {
    let killed = killed_for_memory(&settings.data_dir, Clock::default().now_unix());
    let Some(last) = killed.last() else {
        return;
    };
    let manifest = Manifest::builtin();
    let auto = manifest
        .model(settings.model.as_deref())
        .map(|m| m.name.clone());
    let names: Vec<String> = killed.iter().map(|k| k.model.clone()).collect();
    let listed = killed
        .iter()
        .map(|k| format!("{} on {}", k.model, k.engine))
        .collect::<Vec<_>>()
        .join(", ");
    let mut note = format!(
        "The kernel killed this appliance for memory while it loaded {listed} (the last found \
         at {}): served without ",
        utc_datetime(last.at)
    );
    note.push_str(if killed.len() > 1 { "them" } else { "it" });
    let smallest = "u2netp";
    match auto {
        Some(auto) if names.contains(&auto) && auto != smallest => {
            note.push_str(&format!(", with {smallest} on tract in place of {auto}"));
            settings.model = Some(smallest.into());
            settings.engine.kind = EngineKind::Tract;
        }
        _ => {}
    }
    note.push_str(". Free memory, then try again from the Status page.");
    log::error!("{note}");
    settings.killed_models = names;
    settings.memory_note = Some(note);
}

impl Cli {
    /// Whether the command is the service, which lives past any one reader.
    pub fn serves(&self) -> bool {
        matches!(self.command, Command::Serve { .. })
    }

    /// Whether the command writes files of the caller's, not the appliance's.
    pub fn writes_the_callers_files(&self) -> bool {
        matches!(self.command, Command::Remove { .. })
    }
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<()> {
    let mut settings = settings(&cli)?;
    if cli.serves() {
        let sources = crate::backup::Sources::of(&settings);
        for leftover in crate::backup::remove_leftovers(&settings.data_dir) {
            log::warn!(
                "removed {}, left by a process that ended",
                leftover.display()
            );
        }
        if let Some(contents) = crate::backup::finish_pending(&sources)? {
            log::warn!("put a restored backup in place: {contents}");
            if contents.config {
                settings = self::settings(&cli)?;
            }
        }
    }
    let clock = Clock::default();
    let now = clock.now_unix();
    let data_dir = settings.data_dir.clone();
    let store_settings = settings.store.clone();
    let store = || {
        store::open(&store_settings, &data_dir)
            .with_context(|| format!("opening the database in {}", data_dir.display()))
    };
    match cli.command {
        Command::Serve { demo, .. } => crate::serve::serve(settings, demo),
        Command::Bench {
            seconds,
            save_photo,
        } => bench(&settings, now, seconds, save_photo.as_deref()),
        Command::BenchOne {
            model,
            engine,
            photo,
            rung,
            subject,
            parent,
        } => {
            if let Some(parent) = parent {
                ladder::end_with(parent);
            }
            let rung = match rung {
                Some(name) => Some(
                    SubjectType::parse(&subject)
                        .and_then(|subject| ladder::LadderRung::parse(subject, &name))
                        .ok_or_else(|| anyhow!("no rung {name:?} of type={subject}"))?,
                ),
                None => None,
            };
            let (load, seconds, peak_kib) =
                ladder::measure_one(&settings, &model, engine, &photo, rung)?;
            println!("{load:.3} {seconds:.3} {peak_kib}");
            Ok(())
        }
        Command::Account(AccountCommand::Create { name, plan }) => {
            let name = AccountName::parse(&name)
                .ok_or_else(|| anyhow!("{}", crate::domain::ACCOUNT_NAME_RULE))?;
            store()?.create_account(&name, &plan, now)?;
            println!("created account {name} on plan {plan}");
            Ok(())
        }
        Command::Account(AccountCommand::List) => {
            println!(
                "{:<24} {:<10} {:>8} {:>8} {:>6}",
                "ACCOUNT", "PLAN", "USED", "LIMIT", "CONC"
            );
            for (a, used) in store()?.accounts(Month::of_unix(now))? {
                let limit = a.plan.monthly_limit.map_or("-".into(), |l| l.to_string());
                println!(
                    "{:<24} {:<10} {used:>8} {limit:>8} {:>6}",
                    a.name, a.plan.name, a.plan.concurrency
                );
            }
            Ok(())
        }
        Command::Account(AccountCommand::SetPlan { name, plan }) => {
            store()?.set_plan(&name, &plan)?;
            println!("account {name} is now on plan {plan}");
            Ok(())
        }
        Command::Key(KeyCommand::Create { account, label }) => {
            let label = KeyLabel::parse(&label)
                .ok_or_else(|| anyhow!("--label: {}", crate::domain::KEY_LABEL_RULE))?;
            let key = store()?.create_key(&account, label.as_str(), now)?;
            eprintln!("new key for {account} (shown only now; store it safely):");
            println!("{}", key.expose());
            Ok(())
        }
        Command::Key(KeyCommand::List { account }) => {
            println!(
                "{:<14} {:<20} {:<12} {:<12} {:<13} STATUS",
                "PREFIX", "LABEL", "CREATED", "LAST USED", "LAST IN CLEAR"
            );
            for k in store()?.keys(&account)? {
                let status = if k.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                let last = k.last_used_at.map_or("never".into(), utc_date);
                let clear = k.last_in_clear_at.map_or("never".into(), utc_date);
                println!(
                    "{:<14} {:<20} {:<12} {last:<12} {clear:<13} {status}",
                    k.prefix,
                    k.label,
                    utc_date(k.created_at)
                );
            }
            Ok(())
        }
        Command::Key(KeyCommand::Revoke { key_or_prefix }) => {
            store()?.revoke_key(&key_or_prefix, now)?;
            println!("revoked");
            Ok(())
        }
        Command::Usage {
            account: Some(account),
            set: None,
        } => {
            let store = store()?;
            let a = store.account(&account)?;
            let month = Month::of_unix(now);
            let used = store.usage(a.id, month)?;
            let limit = a
                .plan
                .monthly_limit
                .map_or("unlimited".into(), |l| l.to_string());
            println!("{account} {month}: {used} of {limit}");
            Ok(())
        }
        Command::Usage {
            set: Some(UsageCommand::Set { account, count }),
            ..
        } => {
            let store = store()?;
            let month = Month::of_unix(now);
            let before = store.usage(store.account(&account)?.id, month)?;
            store.set_usage(&account, month, count)?;
            log::warn!("operator set usage of {account} for {month} from {before} to {count}");
            println!("{account} {month}: {count}");
            Ok(())
        }
        Command::Usage {
            account: None,
            set: None,
        } => bail!("name an account: cutout usage ACCOUNT"),
        Command::Admin(AdminCommand::SetPassword) => {
            let store = store()?;
            let password = read_new_password()?;
            check_password_policy(&password).map_err(|why| anyhow!("{why}"))?;
            store.set_admin_password(&hash_password(&password), now)?;
            log::warn!("operator password set from the command line");
            println!("The password of `admin` is set; sign in to the dashboard with it.");
            Ok(())
        }
        Command::Store(StoreCommand::Migrate) => {
            let store = store()?;
            println!("{}: schema up to date", store.describe());
            Ok(())
        }
        Command::Store(StoreCommand::Copy { from, to }) => {
            let dir = from.strip_prefix("sqlite:").ok_or_else(|| {
                anyhow!("--from: sqlite:DIR, the data directory holding cutout.db")
            })?;
            if !Path::new(dir).join("cutout.db").is_file() {
                bail!("--from: no cutout.db in {dir}");
            }
            let copied = store::sqlite_to_postgres(
                Path::new(dir),
                &to,
                settings.store.password_file.as_deref(),
            )?;
            println!(
                "copied {} accounts, {} keys, {} monthly counts{}; what was there already is kept",
                copied.accounts,
                copied.keys,
                copied.counts,
                if copied.admin_password {
                    ", the operator password"
                } else {
                    ""
                }
            );
            Ok(())
        }
        Command::Backup {
            file,
            passphrase_file,
        } => {
            let passphrase = read_passphrase(passphrase_file.as_deref(), true)?;
            let sources = crate::backup::Sources::of(&settings);
            let contents = crate::backup::take(&sources, &passphrase, &file, now)?;
            println!("{}: {}", file.display(), contents);
            Ok(())
        }
        Command::Restore {
            file,
            passphrase_file,
            yes,
            undo,
        } => {
            if let Some(tls) = &settings.tls {
                refuse_while_served(&tls.listen)?;
            }
            refuse_while_served(&settings.listen)?;
            let sources = crate::backup::Sources::of(&settings);
            // A restore cut off half way is finished before anything else.
            if let Some(contents) = crate::backup::finish_pending(&sources)? {
                println!("finished the restore that was cut off: {contents}");
            }
            let staged = match file {
                Some(file) if !undo => {
                    let passphrase = read_passphrase(passphrase_file.as_deref(), false)?;
                    crate::backup::stage(&sources, &passphrase, &file, yes)?
                }
                _ => crate::backup::stage_undo(&sources)?,
            };
            staged.keep_for_next_start()?;
            let contents = crate::backup::finish_pending(&sources)?.expect("a restore staged");
            println!(
                "restored {contents}; what it replaced is in {}; start the service (systemctl start cutout)",
                settings.data_dir.join(crate::backup::REPLACED).display()
            );
            Ok(())
        }
        Command::Backdrop(command) => backdrop(
            &crate::backdrops::Backdrops::in_data_dir(&data_dir),
            command,
        ),
        Command::Tls(TlsCommand::Fingerprint) => {
            let certificate = crate::tls::existing(settings.tls.as_ref(), &settings.data_dir)?;
            println!("{}", certificate.fingerprint);
            Ok(())
        }
        Command::Remove {
            mut paths,
            size,
            subject,
            rung,
            ..
        } => {
            let output = paths.pop().expect("clap requires two paths");
            remove(&settings, &paths, &output, &size, &subject, rung.as_deref())
        }
        Command::Ladder {
            board,
            budget,
            json,
        } => {
            let pipeline = ladder::unloaded_pipeline(&settings, settings.model.as_deref())?;
            let engine = settings.engine.kind;
            // A report measured this board, not the one named.
            let report = match board {
                Some(_) => None,
                None => Report::load(&settings.data_dir),
            };
            let name = board.unwrap_or_else(|| Board::detect().name);
            let budget = budget.unwrap_or(settings.pipeline.budget_seconds);
            if budget.is_nan() || budget <= 0.0 {
                bail!("--budget must be a number of seconds over 0");
            }
            let measured = report.as_ref().and_then(|r| r.ladder.as_ref());
            let view = ladder::view(&pipeline, engine, measured, &name, budget);
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                for line in view.lines() {
                    println!("{line}");
                }
            }
            Ok(())
        }
    }
}

/// A restore under a running service would be overwritten by it, or
/// confuse it: whatever answers on the service's address refuses it.
fn refuse_while_served(listen: &str) -> Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let Some(addr) = listen.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return Ok(());
    };
    let addr = match addr.ip() {
        ip if ip.is_unspecified() => std::net::SocketAddr::from(([127, 0, 0, 1], addr.port())),
        _ => addr,
    };
    if addr.port() != 0
        && TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(500)).is_ok()
    {
        bail!("something answers on {listen}: stop the service first (systemctl stop cutout)");
    }
    Ok(())
}

/// From `file`, typed at the terminal (twice when `new`), or one line piped
/// in; read as every path reads it (`backup::passphrase_in`).
fn read_passphrase(file: Option<&Path>, new: bool) -> Result<String> {
    use std::io::IsTerminal;
    let passphrase = if let Some(file) = file {
        crate::backup::read_passphrase_file(file)?
    } else if std::io::stdin().is_terminal() {
        eprint!("Backup passphrase: ");
        let first = rpassword::read_password()?;
        if new {
            eprint!("The same again: ");
            if rpassword::read_password()? != first {
                bail!("the two passphrases differ");
            }
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        crate::backup::passphrase_in(&line).to_owned()
    };
    if new {
        crate::backup::check_passphrase(&passphrase)?;
    }
    Ok(passphrase)
}

/// One line from stdin: typed at a terminal (twice, not echoed) or piped in.
fn read_new_password() -> Result<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        eprint!("New admin password: ");
        let first = rpassword::read_password()?;
        eprint!("The same again: ");
        if rpassword::read_password()? != first {
            bail!("the two passwords differ");
        }
        return Ok(first);
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        bail!("no password on stdin (try: echo 'my password' | cutout admin set-password)");
    }
    Ok(password.to_owned())
}

fn bench(settings: &Settings, now: i64, seconds: u64, save_photo: Option<&Path>) -> Result<()> {
    use crate::bench;
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("creating {}", settings.data_dir.display()))?;
    let photo_path = match save_photo {
        Some(path) => path.to_path_buf(),
        None => settings.data_dir.join("bench-photo.jpg"),
    };
    std::fs::write(&photo_path, ladder::test_photo())
        .with_context(|| format!("writing {}", photo_path.display()))?;
    eprintln!(
        "one 12 MP photo per model and engine, within {seconds} s; each runs in a process of its own"
    );
    let started = std::time::Instant::now();
    let budget = std::time::Duration::from_secs(seconds);
    let report = bench::run(
        settings,
        now,
        budget,
        &photo_path,
        |row| {
            eprintln!("  {}", row.line());
        },
    )
    .and_then(|mut report| {
        let pipeline = ladder::unloaded_pipeline(settings, settings.model.as_deref())?;
        let model = pipeline.default_model().spec.name.clone();
        let engine = settings.engine.kind;
        let budget_seconds = settings.pipeline.budget_seconds;
        eprintln!(
            "type=auto's and type=person's rungs for {model} on {engine} within the {budget_seconds} s budget, cheapest first; every view, the faster of two runs"
        );
        let ladder = ladder::measure_ladder(
            settings,
            &model,
            &photo_path,
            budget_seconds,
            budget.saturating_sub(started.elapsed()),
            &|| false,
            |row| eprintln!("  {}", row.line()),
        )?;
        let board = Board::detect().name;
        let (_, lines) =
            ladder::best_rung(&pipeline, engine, Some(&ladder), &board, budget_seconds);
        report.ladder = Some(ladder);
        Ok((report, lines))
    });
    if save_photo.is_none() {
        let _ = std::fs::remove_file(&photo_path);
    }
    let (report, ladder) = report?;
    println!("board: {}", report.board);
    for line in report.lines() {
        println!("{line}");
    }
    match &report.recommended {
        Some((model, engine)) => println!(
            "recommended for this board (in /etc/cutout/cutout.toml):\nmodel = \"{model}\"\nengine = \"{engine}\""
        ),
        None => println!("no general model fits this board's memory with room to spare"),
    }
    if let Some(measured) = &report.ladder {
        for row in &measured.rows {
            println!("{}", row.line());
        }
    }
    for line in ladder {
        println!("{line}");
    }
    report
        .save(&settings.data_dir)
        .with_context(|| format!("saving the report in {}", settings.data_dir.display()))?;
    Ok(())
}

/// Demo mode, on an empty database only: account `demo` on Pro and one key.
fn remove(
    settings: &Settings,
    inputs: &[PathBuf],
    output: &Path,
    size: &str,
    subject: &str,
    rung: Option<&str>,
) -> Result<()> {
    let size =
        SizeMode::parse(size).ok_or_else(|| anyhow!("--size must be auto, preview or full"))?;
    let subject = SubjectType::parse(subject)
        .ok_or_else(|| anyhow!("--type must be auto, person or general"))?;
    if rung.is_some() && subject == SubjectType::General {
        bail!("--rung is a rung of --type auto's or --type person's ladder");
    }
    let into_dir = inputs.len() > 1 || output.is_dir();
    if inputs.len() > 1 && !output.is_dir() {
        bail!(
            "{} must be a folder when there are several inputs",
            output.display()
        );
    }
    let models = Manifest::builtin().models_for(
        settings.model.as_deref(),
        settings.general_fits(),
        settings.engine.kind,
        &settings.models_dir,
    )?;
    let loader = Loader {
        models_dir: settings.models_dir.clone(),
        engine: settings.engine.clone(),
        trial: None,
        loads: None,
    };
    let pipeline = Pipeline::new(models, Some(loader), 1, 0, u64::MAX);
    if let Some(name) = rung {
        let rungs = ladder::LadderRung::all(&pipeline, subject);
        let found = rungs.iter().find(|r| r.name() == name).ok_or_else(|| {
            let names: Vec<&str> = rungs.iter().map(|r| r.name()).collect();
            anyhow!("no rung {name:?} here; the ladder has {}", names.join(", "))
        })?;
        found.serve_on(&pipeline);
    }
    // Loaded before the first photo, so that its time is not the photo's.
    let loaded = pipeline.load(subject).unwrap_or_default();
    let model = pipeline.model(subject);
    model.inference.ready().map_err(|e| anyhow!("{e}"))?;
    eprintln!(
        "model {} loaded on {} in {:.2} s",
        model.spec.name,
        model.inference.engine_name().unwrap_or("?"),
        loaded.as_secs_f64()
    );
    for input in inputs {
        let output = if into_dir {
            // `photo.v2.jpg` becomes `photo.v2.png`, not `photo.png`.
            let mut name = input.file_stem().unwrap_or(input.as_os_str()).to_owned();
            name.push(".png");
            output.join(name)
        } else {
            output.to_path_buf()
        };
        let bytes = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
        let started = Instant::now();
        let mut place = pipeline.queue.join(0).expect("an empty queue has room");
        let cut = pipeline
            .cut_out(
                &mut place,
                &bytes,
                size,
                subject,
                &Finish::default(),
                &|| false,
            )
            .map_err(|e| anyhow!("{}: {}: {}", input.display(), e.code(), e.detail()))?;
        let took = started.elapsed();
        std::fs::write(&output, &cut.bytes)
            .with_context(|| format!("writing {}", output.display()))?;
        let steps: Vec<String> = cut
            .timings
            .iter()
            .map(|(step, t)| format!("{step} {:.0} ms", t.as_secs_f64() * 1000.0))
            .collect();
        eprintln!(
            "wrote {} ({}x{}) with {} on {} in {:.2} s ({})",
            output.display(),
            cut.width,
            cut.height,
            cut.model,
            pipeline
                .model(subject)
                .inference
                .engine_name()
                .unwrap_or("?"),
            took.as_secs_f64(),
            steps.join(", ")
        );
    }
    Ok(())
}

fn backdrop(backdrops: &crate::backdrops::Backdrops, command: BackdropCommand) -> Result<()> {
    let read =
        |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    match command {
        BackdropCommand::Add {
            name,
            background,
            overlay,
        } => {
            let overlay = overlay.as_deref().map(read).transpose()?;
            let added = backdrops.add(&name, &read(&background)?, overlay.as_deref())?;
            println!(
                "added {}: {:?}, {}x{}",
                added.id, added.name, added.width, added.height
            );
        }
        BackdropCommand::List => {
            for b in backdrops.list()? {
                let overlay = if b.overlay { ", with an overlay" } else { "" };
                println!("{}\t{}x{}{overlay}\t{}", b.id, b.width, b.height, b.name);
            }
        }
        BackdropCommand::Remove { id } => {
            let removed = backdrops.remove(&id)?;
            println!("deleted {}: {:?}", removed.id, removed.name);
        }
    }
    Ok(())
}
