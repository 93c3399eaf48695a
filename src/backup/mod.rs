//! One file that brings an appliance back on another card (`cutout backup`,
//! `cutout restore`): the SQLite database (accounts, keys as stored, every
//! month's counts, the operator's password hash), the HTTPS certificate and
//! its key (so that every booth's pin still holds), the backdrops and the
//! configuration file: a tar archive, sealed under the operator's
//! passphrase (`seal.rs`).
//!
//! A restore reads and checks the whole file before it changes anything:
//! a wrong passphrase, a file cut short or altered, or one from a newer
//! cutout leaves the appliance as it was.

use crate::tls;

pub mod schedule;
pub mod seal;
use anyhow::{anyhow, bail, Context, Result};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// The archive's layout; a restore refuses one it does not know.
const FORMAT: u32 = 1;
const MANIFEST: &str = "cutout-backup.json";
const DATABASE: &str = "cutout.db";
const CONFIG: &str = "cutout.toml";
const CERTIFICATE: &str = "tls/certificate.pem";
const PRIVATE_KEY: &str = "tls/private-key.pem";
const BACKDROPS: &str = "backdrops";
pub const MIN_PASSPHRASE_CHARS: usize = 12;

#[derive(Serialize, Deserialize)]
struct Manifest {
    format: u32,
    /// The cutout version that took it.
    version: String,
    /// The database's schema (SQLite's `user_version`).
    schema: usize,
    taken_at: i64,
    /// Where the accounts are instead, on an appliance of a fleet: the
    /// shared PostgreSQL store's `host:port/database`. The backup then
    /// holds no database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accounts_in: Option<String>,
}

/// What a backup holds, as `backup` and `restore` report it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub accounts: u64,
    /// The shared store the accounts are in instead, and the command that
    /// backs them up, on an appliance of a fleet.
    pub accounts_in: Option<(String, String)>,
    pub certificate: bool,
    pub backdrops: usize,
    pub config: bool,
    /// Where the backup's configuration file was left, when it could not
    /// be put in place.
    pub config_kept_at: Option<PathBuf>,
}

impl std::fmt::Display for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let no = |present: bool| if present { "" } else { "no " };
        match &self.accounts_in {
            Some((location, dump)) => write!(
                f,
                "no accounts (they are in the shared PostgreSQL store {location}: back them up with `{dump}`), "
            )?,
            None => write!(f, "{} account(s), ", self.accounts)?,
        }
        write!(
            f,
            "{}HTTPS certificate, {} backdrop(s), {}configuration file",
            no(self.certificate),
            self.backdrops,
            no(self.config),
        )?;
        if let Some(kept) = &self.config_kept_at {
            let kept = kept.display();
            write!(f, " (the backup's configuration is in {kept}: copy it over the configuration file, as root, to use it)")?;
        }
        Ok(())
    }
}

/// The passphrase in `text`, read the one way every path reads it (the
/// schedule, `cutout backup` and `restore`, piped in, typed on a page): the
/// first line, without its line ending (LF or CRLF) or a leading byte-order
/// mark, so that the lines after it can hold comments and a file written on
/// Windows reads the same. Nothing else is trimmed: spaces are part of it.
pub fn passphrase_in(text: &str) -> &str {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let line = text.split('\n').next().unwrap_or_default();
    line.strip_suffix('\r').unwrap_or(line)
}

/// The passphrase in `file` (`passphrase_in`); an empty first line is
/// refused rather than taken as the passphrase.
pub fn read_passphrase_file(file: &Path) -> Result<String> {
    let text = fs::read_to_string(file)
        .with_context(|| format!("cannot read the passphrase file {}", file.display()))?;
    let passphrase = passphrase_in(&text);
    if passphrase.is_empty() {
        bail!(
            "the passphrase file {} has no passphrase on its first line",
            file.display()
        );
    }
    Ok(passphrase.to_owned())
}

pub fn check_passphrase(passphrase: &str) -> Result<()> {
    if passphrase.chars().count() < MIN_PASSPHRASE_CHARS {
        bail!("the passphrase must have at least {MIN_PASSPHRASE_CHARS} characters");
    }
    Ok(())
}

/// Where the appliance keeps what a backup holds.
#[derive(Debug, Clone)]
pub struct Sources {
    pub data_dir: PathBuf,
    /// The configuration file in use (it may not exist).
    pub config: PathBuf,
    pub tls: Option<crate::config::TlsSettings>,
    /// The shared PostgreSQL store's URL, where the accounts are kept
    /// instead of the data directory's database.
    pub shared_store: Option<String>,
}

impl Sources {
    pub fn of(settings: &crate::config::Settings) -> Sources {
        Sources {
            data_dir: settings.data_dir.clone(),
            config: settings.config_file.clone(),
            tls: settings.tls.clone(),
            shared_store: settings.store.url.clone(),
        }
    }
}

/// Writes a backup of `appliance` to `to` (through `to.partial`, renamed
/// when whole). The database is copied by SQLite itself (`VACUUM INTO`: a
/// read transaction), so a running service goes on serving and charging.
pub fn take(appliance: &Sources, passphrase: &str, to: &Path, now: i64) -> Result<Contents> {
    check_passphrase(passphrase)?;
    let database = appliance.data_dir.join(DATABASE);
    let accounts_in = appliance
        .shared_store
        .as_deref()
        .map(crate::store::dump_command)
        .transpose()?;
    if accounts_in.is_none() && !database.exists() {
        bail!("no database at {}: nothing to back up", database.display());
    }
    let snapshot = match &accounts_in {
        Some(_) => None,
        None => {
            let snapshot = Scratch(scratch_path(&appliance.data_dir, "backup", ".db"));
            let conn = Connection::open(&database)?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            conn.execute("VACUUM INTO ?1", [snapshot.0.to_string_lossy()])
                .context("copying the database")?;
            Some(snapshot)
        }
    };
    let (schema, accounts) = match &snapshot {
        Some(snapshot) => describe(&snapshot.0)?,
        None => (0, 0),
    };

    let partial = PathBuf::from(format!("{}.partial", to.display()));
    let file =
        fs::File::create(&partial).with_context(|| format!("writing {}", partial.display()))?;
    let written = Scratch(partial);
    let sealed = seal::Sealing::new(std::io::BufWriter::new(file), passphrase)?;
    let mut archive = tar::Builder::new(sealed);
    let manifest = Manifest {
        format: FORMAT,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        schema,
        taken_at: now,
        accounts_in: accounts_in.as_ref().map(|(location, _)| location.clone()),
    };
    let mut contents = Contents {
        accounts,
        accounts_in,
        ..Contents::default()
    };
    append(
        &mut archive,
        MANIFEST,
        &serde_json::to_vec_pretty(&manifest)?,
        now,
    )?;
    if let Some(snapshot) = &snapshot {
        append_file(&mut archive, DATABASE, &snapshot.0, now)?;
    }
    if let Ok(certificate) = tls::existing(appliance.tls.as_ref(), &appliance.data_dir) {
        append(&mut archive, CERTIFICATE, &certificate.chain_pem, now)?;
        append(&mut archive, PRIVATE_KEY, &certificate.key_pem, now)?;
        contents.certificate = true;
    }
    let backdrops = appliance.data_dir.join(BACKDROPS);
    for dir in sorted_entries(&backdrops)? {
        let id = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if id.starts_with('.') || !dir.is_dir() {
            continue; // an upload being written
        }
        for file in sorted_entries(&dir)? {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            append_file(
                &mut archive,
                &format!("{BACKDROPS}/{id}/{name}"),
                &file,
                now,
            )?;
        }
        contents.backdrops += 1;
    }
    if let Ok(config) = fs::read(&appliance.config) {
        append(&mut archive, CONFIG, &config, now)?;
        contents.config = true;
    }
    let file = archive.into_inner()?.finish()?;
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fs::rename(&written.0, to).with_context(|| format!("writing {}", to.display()))?;
    Ok(contents)
}

/// A backup unpacked beside the data and checked whole, not yet in place.
pub struct Staged {
    appliance: Sources,
    dir: Scratch,
}

/// Where a backup restored on the setup page waits for the next start:
/// the running service holds the database open, so it cannot replace it.
const PENDING: &str = ".restore-pending";

/// Unpacks `from` and checks all of it, changing nothing of `appliance`:
/// refused for a wrong passphrase, a damaged or newer backup, or an
/// appliance with accounts unless `replace`.
pub fn stage(appliance: &Sources, passphrase: &str, from: &Path, replace: bool) -> Result<Staged> {
    let staging = Scratch(scratch_path(&appliance.data_dir, "restore", ""));
    fs::create_dir_all(&staging.0).with_context(|| format!("creating {}", staging.0.display()))?;
    let manifest = unpack(from, passphrase, &staging.0)?;
    if manifest.format != FORMAT {
        bail!(
            "{} was made by a newer cutout ({}, backup format {}): install that version or newer to restore it",
            from.display(),
            manifest.version,
            manifest.format
        );
    }
    let known = crate::store::SqliteStore::schema_version();
    if manifest.schema > known {
        bail!(
            "{} was made by a newer cutout ({}, database schema {}; this one knows up to {known}): install that version or newer to restore it",
            from.display(),
            manifest.version,
            manifest.schema
        );
    }
    // The appliance as it was backed up: a part it had none of is put
    // aside as the others are (and an undo knows what the restore changed).
    let absent: Vec<&str> = [CERTIFICATE, PRIVATE_KEY, BACKDROPS]
        .into_iter()
        .filter(|name| !staging.0.join(name).exists())
        .collect();
    write_whole(&staging.0.join(ABSENT), absent.join("\n").as_bytes())?;
    let staged_db = staging.0.join(DATABASE);
    if manifest.accounts_in.is_some() {
        // An appliance of a fleet: its own parts alone.
        return Ok(Staged {
            appliance: appliance.clone(),
            dir: staging,
        });
    }
    if !staged_db.exists() {
        bail!("{} holds no database: not a cutout backup", from.display());
    }
    check_integrity(&staged_db)?;
    // Brought up to this version's schema before anything is replaced.
    drop(crate::store::SqliteStore::open(&staging.0).context("migrating the backup's database")?);
    let database = appliance.data_dir.join(DATABASE);
    if database.exists() && !replace {
        let (_, present) = describe(&database)?;
        if present > 0 {
            bail!(
                "this appliance already has {present} account(s): restoring replaces them and their keys (add --yes to go on)"
            );
        }
    }
    Ok(Staged {
        appliance: appliance.clone(),
        dir: staging,
    })
}

/// Puts in place a backup the setup page restored or `cutout restore`
/// staged (`Staged::keep_for_next_start`), before the service opens
/// anything; `None` if there is none. A restore cut off half way (killed,
/// a power cut) is finished here, at the next start.
pub fn finish_pending(appliance: &Sources) -> Result<Option<Contents>> {
    let dir = appliance.data_dir.join(PENDING);
    if !dir.exists() {
        return Ok(None);
    }
    let staged = Staged {
        appliance: appliance.clone(),
        dir: Scratch(dir),
    };
    let done = staged.commit();
    if done.is_err() {
        staged.dir.keep(); // for the next start to finish
    }
    done.map(Some)
}

/// Where a restore keeps what it replaced, laid out as a backup unpacked:
/// `cutout restore --undo` puts it back, the Status page deletes it.
pub const REPLACED: &str = "replaced-by-restore";
/// In `REPLACED`: when the restore that replaced it finished (Unix seconds).
const RESTORED_AT: &str = "restored-at";
/// In a staging: the parts the appliance being put back had none of (a
/// backup without backdrops; before the restore an undo reverses), which
/// are put aside without putting anything back.
const ABSENT: &str = "absent";

/// What the last restore replaced, as the Status page shows it.
pub struct Replaced {
    pub dir: PathBuf,
    pub restored_at: Option<i64>,
    pub database: bool,
    pub certificate: bool,
    pub backdrops: usize,
    pub config: bool,
}

/// What the last restore replaced, if it is still kept.
pub fn replaced(data_dir: &Path) -> Option<Replaced> {
    let dir = data_dir.join(REPLACED);
    if !dir.is_dir() {
        return None;
    }
    Some(Replaced {
        restored_at: fs::read_to_string(dir.join(RESTORED_AT))
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        database: dir.join(DATABASE).exists(),
        certificate: dir.join(CERTIFICATE).exists(),
        backdrops: sorted_entries(&dir.join(BACKDROPS)).map_or(0, |e| e.len()),
        config: dir.join(CONFIG).exists(),
        dir,
    })
}

/// Stages what the last restore replaced, to be put back as a restore is
/// (what it replaces is kept in its turn). The service must be stopped.
pub fn stage_undo(appliance: &Sources) -> Result<Staged> {
    let replaced = appliance.data_dir.join(REPLACED);
    if !replaced.is_dir() {
        bail!(
            "nothing to undo: no restore has replaced anything here ({} is absent)",
            replaced.display()
        );
    }
    let staging = Scratch(scratch_path(&appliance.data_dir, "restore", ""));
    fs::rename(&replaced, &staging.0)?;
    let _ = fs::remove_file(staging.0.join(RESTORED_AT));
    // What the restore added where there was nothing goes too.
    let absent: Vec<&str> = [DATABASE, CERTIFICATE, PRIVATE_KEY, BACKDROPS]
        .into_iter()
        .filter(|name| !staging.0.join(name).exists())
        .collect();
    write_whole(&staging.0.join(ABSENT), absent.join("\n").as_bytes())?;
    Ok(Staged {
        appliance: appliance.clone(),
        dir: staging,
    })
}

impl Staged {
    /// Leaves the checked backup for the next start of the service to put
    /// in place (`finish_pending`). What an earlier restore replaced is
    /// deleted first: only the last restore can be undone.
    pub fn keep_for_next_start(self) -> Result<()> {
        let pending = self.appliance.data_dir.join(PENDING);
        let _ = fs::remove_dir_all(&pending);
        let _ = fs::remove_dir_all(self.appliance.data_dir.join(REPLACED));
        fs::rename(self.dir.keep(), &pending)?;
        Ok(())
    }

    /// Puts each part in place, the part it replaces moved into `REPLACED`
    /// first. Each step is a rename that is done or not, and is skipped
    /// once done, so that a restore cut off between any two steps is
    /// finished by running this again (`finish_pending`).
    pub fn commit(&self) -> Result<Contents> {
        self.commit_with(&mut |_| {})
    }

    /// `commit`, calling `after` with each step's name once it is done.
    fn commit_with(&self, after: &mut dyn FnMut(&str)) -> Result<Contents> {
        let (staging, data_dir) = (&self.dir.0, &self.appliance.data_dir);
        let replaced = data_dir.join(REPLACED);
        fs::create_dir_all(replaced.join("tls"))?;
        let mut contents = Contents::default();
        // The database last of its files: its rename is the step's end.
        let database = ["-wal", "-shm", ""].map(|suffix| format!("{DATABASE}{suffix}"));
        if staging.join(DATABASE).exists() {
            for name in &database {
                put_aside(&data_dir.join(name), &replaced.join(name))?;
                after(&format!("{name} put aside"));
            }
            for name in &database {
                if staging.join(name).exists() {
                    fs::rename(staging.join(name), data_dir.join(name))?;
                    after(&format!("{name} restored"));
                }
            }
        }
        // On an appliance of a fleet the accounts stay in its shared store.
        let shared = self.appliance.shared_store.as_deref();
        contents.accounts_in = shared.and_then(|url| crate::store::dump_command(url).ok());
        if contents.accounts_in.is_none() && data_dir.join(DATABASE).exists() {
            contents.accounts = describe(&data_dir.join(DATABASE))?.1;
        }
        contents.certificate = staging.join(CERTIFICATE).exists();
        for name in [CERTIFICATE, PRIVATE_KEY] {
            if staging.join(name).exists() {
                fs::create_dir_all(data_dir.join("tls"))?;
                put_aside(&data_dir.join(name), &replaced.join(name))?;
                after(&format!("{name} put aside"));
                fs::rename(staging.join(name), data_dir.join(name))?;
                after(&format!("{name} restored"));
            }
        }
        let staged_backdrops = staging.join(BACKDROPS);
        if staged_backdrops.exists() {
            contents.backdrops = sorted_entries(&staged_backdrops)?.len();
            put_aside(&data_dir.join(BACKDROPS), &replaced.join(BACKDROPS))?;
            after("backdrops put aside");
            fs::rename(&staged_backdrops, data_dir.join(BACKDROPS))?;
            after("backdrops restored");
        }
        let absent = fs::read_to_string(staging.join(ABSENT)).unwrap_or_default();
        for name in absent.lines() {
            put_aside(&data_dir.join(name), &replaced.join(name))?;
            after(&format!("{name} put aside, as it was absent"));
        }
        let staged_config = staging.join(CONFIG);
        if staged_config.exists() {
            let config = fs::read(&staged_config)?;
            let kept = replaced.join(CONFIG);
            if !kept.exists() {
                if let Ok(current) = fs::read(&self.appliance.config) {
                    write_whole(&kept, &current)?;
                    after("configuration copied aside");
                }
            }
            match put_config(&self.appliance.config, &config) {
                Ok(()) => contents.config = true,
                Err(e) => {
                    // The service may not write /etc (ProtectSystem=strict):
                    // `sudo cutout restore` can.
                    let kept = data_dir.join("cutout.toml.from-backup");
                    fs::write(&kept, &config)?;
                    log::warn!(
                        "the backup's configuration is not in place ({e:#}); it is in {}",
                        kept.display()
                    );
                    contents.config_kept_at = Some(kept);
                }
            }
            fs::remove_file(&staged_config)?;
            after("configuration restored");
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let now = now.map_or(0, |d| d.as_secs());
        write_whole(&replaced.join(RESTORED_AT), now.to_string().as_bytes())?;
        give_to_the_data_dirs_owner(data_dir)?;
        Ok(contents)
    }
}

/// Moves `current`, if there is one, to `aside`.
fn put_aside(current: &Path, aside: &Path) -> Result<()> {
    if current.exists() {
        if aside.is_dir() {
            fs::remove_dir_all(aside)?;
        }
        fs::rename(current, aside)
            .with_context(|| format!("moving {} to {}", current.display(), aside.display()))?;
    }
    Ok(())
}

/// `bytes` at `path`, through a file renamed when whole.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let partial = format!("{}.partial", path.display());
    fs::write(&partial, bytes).with_context(|| format!("writing {partial}"))?;
    fs::rename(&partial, path)?;
    Ok(())
}

/// `config` in place of the file at `path`, unless equal.
fn put_config(path: &Path, config: &[u8]) -> Result<()> {
    if fs::read(path).ok().as_deref() == Some(config) {
        return Ok(());
    }
    if !path.parent().is_some_and(|d| d.is_dir()) {
        bail!("no directory for {}", path.display());
    }
    write_whole(path, config)
}

/// Decrypts and unpacks `from` into `staging`, to the end of the stream
/// (whose last chunk proves nothing was cut off), keeping only the names a
/// backup has.
fn unpack(from: &Path, passphrase: &str, staging: &Path) -> Result<Manifest> {
    let file = fs::File::open(from).with_context(|| format!("reading {}", from.display()))?;
    let not_a_backup = || anyhow!("{} is not a cutout backup", from.display());
    let damaged = || {
        anyhow!(
            "{} is damaged (cut short or altered): nothing was restored",
            from.display()
        )
    };
    let reader =
        seal::Opening::new(std::io::BufReader::new(file), passphrase).map_err(|e| match e {
            seal::OpenError::NotSealed => not_a_backup(),
            seal::OpenError::TooCostly(why) => anyhow!("{}: {why}", from.display()),
            seal::OpenError::WrongPassphrase => anyhow!(
                "wrong passphrase for {} (or its first bytes are damaged)",
                from.display()
            ),
            seal::OpenError::Damaged => damaged(),
        })?;
    let mut archive = tar::Archive::new(reader);
    let mut manifest = None;
    for entry in archive.entries().map_err(|_| damaged())? {
        let mut entry = entry.map_err(|_| damaged())?;
        let name = entry.path().map_err(|_| damaged())?.into_owned();
        let Some(relative) = known_name(&name) else {
            bail!(
                "{} holds {}, which no cutout backup has",
                from.display(),
                name.display()
            );
        };
        if relative == Path::new(MANIFEST) {
            let mut bytes = vec![];
            entry.read_to_end(&mut bytes).map_err(|_| damaged())?;
            manifest = Some(serde_json::from_slice::<Manifest>(&bytes).map_err(|_| damaged())?);
            continue;
        }
        let path = staging.join(relative);
        fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        let mut file = fs::File::create(&path)?;
        std::io::copy(&mut entry, &mut file).map_err(|_| damaged())?;
    }
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink()).map_err(|_| damaged())?;
    manifest.ok_or_else(not_a_backup)
}

/// `name` if a backup may hold it: the fixed files, and a backdrop's files
/// one directory deep, with no `..` or absolute parts.
fn known_name(name: &Path) -> Option<&Path> {
    let parts: Vec<_> = name.components().collect();
    if !parts.iter().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let fixed = [MANIFEST, DATABASE, CONFIG, CERTIFICATE, PRIVATE_KEY];
    let known = fixed.iter().any(|f| name == Path::new(f))
        || (parts.len() == 3 && parts[0].as_os_str() == BACKDROPS);
    known.then_some(name)
}

fn check_integrity(database: &Path) -> Result<()> {
    let conn = Connection::open(database)?;
    let verdict: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .context("checking the backup's database")?;
    if verdict != "ok" {
        bail!("the backup's database fails SQLite's integrity check: {verdict}");
    }
    Ok(())
}

/// The database's schema version and its number of accounts.
fn describe(database: &Path) -> Result<(usize, u64)> {
    let conn = Connection::open(database)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let schema: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let accounts = conn
        .query_row("SELECT count(*) FROM accounts", [], |r| r.get(0))
        .unwrap_or(0);
    Ok((schema, accounts))
}

fn append(
    archive: &mut tar::Builder<impl Write>,
    name: &str,
    bytes: &[u8],
    now: i64,
) -> Result<()> {
    append_read(archive, name, bytes.len() as u64, bytes, now)
}

/// The file at `path`, streamed: a backdrop or the database is not held
/// in memory whole.
fn append_file(
    archive: &mut tar::Builder<impl Write>,
    name: &str,
    path: &Path,
    now: i64,
) -> Result<()> {
    let file = fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let size = file.metadata()?.len();
    append_read(archive, name, size, file.take(size), now)
}

fn append_read(
    archive: &mut tar::Builder<impl Write>,
    name: &str,
    size: u64,
    data: impl Read,
    now: i64,
) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o600);
    header.set_mtime(now.max(0) as u64);
    header.set_entry_type(tar::EntryType::Regular);
    archive.append_data(&mut header, name, data)?;
    Ok(())
}

/// The entries of `dir` by name; none if it does not exist.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    paths.sort();
    Ok(paths)
}

/// Run as root (`sudo cutout restore`), the restored files would be root's,
/// and the service's user could not open them: they become the data
/// directory's owner's.
fn give_to_the_data_dirs_owner(data_dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = fs::metadata(data_dir)?;
    for part in [DATABASE, "tls", BACKDROPS, REPLACED] {
        for path in tree(&data_dir.join(part))? {
            let current = fs::metadata(&path)?;
            if (current.uid(), current.gid()) != (owner.uid(), owner.gid()) {
                std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))
                    .with_context(|| {
                        format!("giving {} to the data directory's owner", path.display())
                    })?;
            }
        }
    }
    Ok(())
}

/// `path` and everything under it; nothing where it does not exist.
fn tree(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.exists() {
        return Ok(vec![]);
    }
    let mut paths = vec![path.to_owned()];
    if path.is_dir() {
        for entry in sorted_entries(path)? {
            paths.extend(tree(&entry)?);
        }
    }
    Ok(paths)
}

/// The bytes free to the service on the file system of `dir`, where it can
/// be examined.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let fs = rustix::fs::statvfs(dir).ok()?;
    Some(fs.f_bavail.saturating_mul(fs.f_frsize))
}

/// The kinds of scratch files and directories in the data directory.
const SCRATCH_KINDS: [&str; 4] = ["backup", "restore", "upload", "download"];

/// A scratch file or directory of `kind` (`SCRATCH_KINDS`) in `data_dir`,
/// `.KIND-PID-RANDOM.EXT`: the process's id tells a later start the
/// leftovers of one that crashed (`remove_leftovers`) from those of one
/// still running (`cutout backup` beside the service).
pub fn scratch_path(data_dir: &Path, kind: &str, extension: &str) -> PathBuf {
    debug_assert!(SCRATCH_KINDS.contains(&kind));
    let (pid, random) = (std::process::id(), crate::secrets::random_hex(8));
    data_dir.join(format!(".{kind}-{pid}-{random}{extension}"))
}

/// Removes the scratch files and directories (`scratch_path`) in
/// `data_dir` whose process is no longer running: the plain copies of a
/// database, an upload or a backup that a crash left. What it removed.
pub fn remove_leftovers(data_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(data_dir) else {
        return Vec::new();
    };
    let leftovers = entries.flatten().filter(|entry| {
        let name = entry.file_name();
        let pid = name.to_str().and_then(scratch_pid);
        pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
    leftovers
        .map(|entry| entry.path())
        .filter(|path| {
            fs::remove_dir_all(path)
                .or_else(|_| fs::remove_file(path))
                .is_ok()
        })
        .collect()
}

/// The process id in a scratch name (`scratch_path`).
fn scratch_pid(name: &str) -> Option<u32> {
    let (kind, rest) = name.strip_prefix('.')?.split_once('-')?;
    let (pid, _) = rest.split_once('-')?;
    SCRATCH_KINDS.contains(&kind).then_some(())?;
    pid.parse().ok()
}

/// A file or directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// No longer removed when dropped.
    fn keep(mut self) -> PathBuf {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.0).or_else(|_| fs::remove_file(&self.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child the test below starts: its data directory, and
    /// the step after which it kills itself.
    const CHILD_DIR: &str = "CUTOUT_TEST_RESTORE_DIR";
    const CHILD_KILLED_AFTER: &str = "CUTOUT_TEST_RESTORE_KILLED_AFTER";

    /// An appliance in `dir/data` whose every part is named `name`: one
    /// account, certificate, backdrop and configuration file.
    fn appliance(dir: &Path, name: &str) -> Sources {
        let data_dir = dir.join("data");
        fs::create_dir_all(data_dir.join("tls")).unwrap();
        let store = crate::store::SqliteStore::open(&data_dir).unwrap();
        use crate::store::Store;
        let account = crate::domain::AccountName::parse(name).unwrap();
        store.create_account(&account, "pro", 0).unwrap();
        drop(store);
        fs::write(data_dir.join(CERTIFICATE), name).unwrap();
        fs::write(data_dir.join(PRIVATE_KEY), name).unwrap();
        fs::create_dir_all(data_dir.join(BACKDROPS).join(name)).unwrap();
        fs::write(
            data_dir.join(BACKDROPS).join(name).join("background.png"),
            name,
        )
        .unwrap();
        fs::write(dir.join(CONFIG), name).unwrap();
        Sources {
            config: dir.join(CONFIG),
            data_dir,
            tls: None,
            shared_store: None,
        }
    }

    /// The appliance `old` in `dir`, with the appliance `new` staged over
    /// it as `cutout restore` and the setup page leave it.
    fn staged_over(dir: &Path) -> Staged {
        let new = appliance(&dir.join("backup"), "new");
        fs::write(new.data_dir.join(CONFIG), "new").unwrap();
        let old = appliance(dir, "old");
        let staged = Staged {
            appliance: old,
            dir: Scratch(new.data_dir),
        };
        staged.keep_for_next_start().unwrap();
        Staged {
            appliance: appliance_at(dir),
            dir: Scratch(dir.join("data").join(PENDING)),
        }
    }

    fn appliance_at(dir: &Path) -> Sources {
        Sources {
            data_dir: dir.join("data"),
            config: dir.join(CONFIG),
            tls: None,
            shared_store: None,
        }
    }

    /// The name each part of the appliance in `data_dir` (with its
    /// configuration at `config`) has, or "-" for a part missing.
    fn parts(data_dir: &Path, config: &Path) -> Vec<String> {
        let account = crate::store::SqliteStore::open(data_dir)
            .ok()
            .and_then(|store| {
                use crate::store::Store;
                let month = crate::domain::Month::of_unix(0);
                let names: Vec<_> = store
                    .accounts(month)
                    .ok()?
                    .into_iter()
                    .map(|(a, _)| a.name)
                    .collect();
                Some(names.join(","))
            });
        let read = |path: PathBuf| fs::read_to_string(path).unwrap_or_else(|_| "-".into());
        let backdrops = sorted_entries(&data_dir.join(BACKDROPS)).unwrap_or_default();
        vec![
            account.unwrap_or_else(|| "-".into()),
            read(data_dir.join(CERTIFICATE)),
            read(data_dir.join(PRIVATE_KEY)),
            backdrops
                .iter()
                .map(|b| b.file_name().unwrap().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(","),
            read(config.to_owned()),
        ]
    }

    #[test]
    #[ignore = "a restore that the test below runs in a child process"]
    fn child_restore() {
        let dir = PathBuf::from(std::env::var_os(CHILD_DIR).expect("run by the test below"));
        let killed_after = std::env::var(CHILD_KILLED_AFTER).unwrap();
        let staged = Staged {
            appliance: appliance_at(&dir),
            dir: Scratch(dir.join("data").join(PENDING)),
        };
        staged
            .commit_with(&mut |step| {
                if step == killed_after {
                    // SAFETY: kill on this process; it does not return.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                }
            })
            .unwrap();
        panic!("not killed after {killed_after}");
    }

    #[test]
    fn a_restore_killed_after_any_step_is_finished_at_the_next_start_and_what_it_replaced_is_kept()
    {
        use std::os::unix::process::ExitStatusExt;
        let whole = |dir: &Path| {
            let restored = parts(&dir.join("data"), &dir.join(CONFIG));
            let replaced = dir.join("data").join(REPLACED);
            let kept = parts(&replaced, &replaced.join(CONFIG));
            (restored, kept)
        };
        let new_over_old = (
            ["new", "new", "new", "new", "new"]
                .map(String::from)
                .to_vec(),
            ["old", "old", "old", "old", "old"]
                .map(String::from)
                .to_vec(),
        );
        let mut steps = vec![];
        let dir = tempfile::tempdir().unwrap();
        staged_over(dir.path())
            .commit_with(&mut |step| steps.push(step.to_owned()))
            .unwrap();
        assert_eq!(whole(dir.path()), new_over_old);
        assert!(steps.len() >= 10, "{steps:?}");

        for step in &steps {
            let dir = tempfile::tempdir().unwrap();
            staged_over(dir.path()).dir.keep();
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "backup::tests::child_restore", "--ignored"])
                .env(CHILD_DIR, dir.path())
                .env(CHILD_KILLED_AFTER, step)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL), "killed after {step}");
            // The next start.
            let finished = finish_pending(&appliance_at(dir.path())).unwrap();
            assert!(finished.is_some(), "after {step}: the restore was pending");
            assert_eq!(whole(dir.path()), new_over_old, "killed after {step}");
            assert!(!dir.path().join("data").join(PENDING).exists());
        }

        // Undone: the old appliance back, the restored one kept in its turn.
        let sources = appliance_at(dir.path());
        stage_undo(&sources).unwrap().keep_for_next_start().unwrap();
        finish_pending(&sources).unwrap();
        let (restored, kept) = whole(dir.path());
        assert_eq!((kept, restored), new_over_old);
    }

    #[test]
    fn a_backup_without_backdrops_or_a_certificate_restores_none_and_keeps_the_ones_it_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let new = appliance(&dir.path().join("backup"), "new");
        fs::remove_dir_all(new.data_dir.join(BACKDROPS)).unwrap();
        let backup = dir.path().join("new.backup");
        let passphrase = "correct horse battery staple";
        assert_eq!(take(&new, passphrase, &backup, 0).unwrap().backdrops, 0);
        let old = appliance(dir.path(), "old");
        let restored = stage(&old, passphrase, &backup, true)
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(restored.backdrops, 0);
        // "new" is no PEM certificate, so the backup has none either.
        let parts = |data_dir: &Path| parts(data_dir, &old.config)[..4].join(" ");
        assert_eq!(parts(&old.data_dir), "new - - ");
        assert_eq!(parts(&old.data_dir.join(REPLACED)), "old old old old");

        stage_undo(&old).unwrap().commit().unwrap();
        assert_eq!(parts(&old.data_dir), "old old old old");
    }

    #[test]
    fn only_a_backups_own_names_are_unpacked() {
        for name in [
            MANIFEST,
            DATABASE,
            CONFIG,
            CERTIFICATE,
            PRIVATE_KEY,
            "backdrops/a1/name",
        ] {
            assert!(known_name(Path::new(name)).is_some(), "{name}");
        }
        for name in [
            "../cutout.db",
            "/etc/passwd",
            "backdrops/../../x",
            "backdrops/a1",
            "backdrops/a1/b/c",
            "tls/other.pem",
            "cutout.db/x",
        ] {
            assert!(known_name(Path::new(name)).is_none(), "{name}");
        }
    }

    #[test]
    fn a_passphrase_is_the_first_line_without_its_ending_or_a_byte_order_mark() {
        let typed = "correct horse battery staple";
        for text in [
            "correct horse battery staple",
            "correct horse battery staple\n",
            "correct horse battery staple\r\n# keep a copy elsewhere\r\n",
            "\u{feff}correct horse battery staple\r\n",
            "correct horse battery staple\n# a comment\n\nanother line\n",
        ] {
            assert_eq!(passphrase_in(text), typed, "{text:?}");
        }
        assert_eq!(passphrase_in(" spaced \r\n"), " spaced ");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passphrase");
        fs::write(&file, "\r\n# the passphrase was left out\r\n").unwrap();
        let why = read_passphrase_file(&file).unwrap_err().to_string();
        assert!(why.contains("no passphrase on its first line"), "{why}");
        let why = format!(
            "{:#}",
            read_passphrase_file(&dir.path().join("gone")).unwrap_err()
        );
        assert!(why.contains("cannot read the passphrase file"), "{why}");
    }

    #[test]
    fn a_scratch_name_holds_the_pid_of_the_process_that_made_it() {
        let dir = Path::new("/data");
        let path = scratch_path(dir, "backup", ".db");
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(scratch_pid(name), Some(std::process::id()), "{name}");
        assert_eq!(scratch_pid(".restore-12-ab"), Some(12));
        assert_eq!(scratch_pid(PENDING), None, "the setup page's restore stays");
        assert_eq!(scratch_pid(".cache-12-ab"), None, "not a scratch kind");
        assert_eq!(scratch_pid("backup-12-ab"), None);
    }

    #[test]
    fn a_short_passphrase_is_refused() {
        assert!(check_passphrase("eleven char").is_err());
        assert!(check_passphrase("twelve chars").is_ok());
    }
}
