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
}

/// What a backup holds, as `backup` and `restore` report it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub accounts: u64,
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
        write!(
            f,
            "{} account(s), {}HTTPS certificate, {} backdrop(s), {}configuration file",
            self.accounts,
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
}

impl Sources {
    pub fn of(settings: &crate::config::Settings) -> Sources {
        Sources {
            data_dir: settings.data_dir.clone(),
            config: settings.config_file.clone(),
            tls: settings.tls.clone(),
        }
    }
}

/// Writes a backup of `appliance` to `to` (through `to.partial`, renamed
/// when whole). The database is copied by SQLite itself (`VACUUM INTO`: a
/// read transaction), so a running service goes on serving and charging.
pub fn take(appliance: &Sources, passphrase: &str, to: &Path, now: i64) -> Result<Contents> {
    check_passphrase(passphrase)?;
    let database = appliance.data_dir.join(DATABASE);
    if !database.exists() {
        bail!("no database at {}: nothing to back up", database.display());
    }
    let snapshot = Scratch(scratch_path(&appliance.data_dir, "backup", ".db"));
    let conn = Connection::open(&database)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.execute("VACUUM INTO ?1", [snapshot.0.to_string_lossy()])
        .context("copying the database")?;
    drop(conn);
    let (schema, accounts) = describe(&snapshot.0)?;

    let partial = PathBuf::from(format!("{}.partial", to.display()));
    let file =
        fs::File::create(&partial).with_context(|| format!("writing {}", partial.display()))?;
    let written = Scratch(partial);
    let sealed = seal::Sealing::new(std::io::BufWriter::new(file), passphrase)?;
    let mut archive = tar::Builder::new(sealed);
    let mut contents = Contents {
        accounts,
        ..Contents::default()
    };
    let manifest = Manifest {
        format: FORMAT,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        schema,
        taken_at: now,
    };
    append(
        &mut archive,
        MANIFEST,
        &serde_json::to_vec_pretty(&manifest)?,
        now,
    )?;
    append_file(&mut archive, DATABASE, &snapshot.0, now)?;
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

/// Replaces `appliance`'s accounts, certificate, backdrops and configuration
/// with the backup's. Refused, with nothing changed, for a wrong passphrase,
/// a damaged or newer backup, or an appliance with accounts unless
/// `replace`. The service must be stopped (`cutout restore` checks).
pub fn restore(
    appliance: &Sources,
    passphrase: &str,
    from: &Path,
    replace: bool,
) -> Result<Contents> {
    stage(appliance, passphrase, from, replace)?.commit()
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
    let staged_db = staging.0.join(DATABASE);
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

/// Puts in place a backup the setup page restored (`Staged::keep_for_next_start`),
/// before the service opens anything; `None` if there is none.
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

impl Staged {
    /// Leaves the checked backup for the next start of the service to put
    /// in place (`finish_pending`).
    pub fn keep_for_next_start(self) -> Result<()> {
        let pending = self.appliance.data_dir.join(PENDING);
        let _ = fs::remove_dir_all(&pending);
        fs::rename(self.dir.keep(), &pending)?;
        Ok(())
    }

    /// Puts each part in place, moving it out of the staging directory:
    /// cut off half way (a power cut at start), the next start does the rest.
    pub fn commit(&self) -> Result<Contents> {
        let (staging, appliance) = (&self.dir.0, &self.appliance);
        let mut contents = Contents::default();
        let (staged_db, database) = (staging.join(DATABASE), appliance.data_dir.join(DATABASE));
        if staged_db.exists() {
            for suffix in ["-wal", "-shm"] {
                let _ = fs::remove_file(format!("{}{suffix}", database.display()));
            }
            fs::rename(&staged_db, &database)?;
        }
        contents.accounts = describe(&database)?.1;
        let (cert, key) = (staging.join(CERTIFICATE), staging.join(PRIVATE_KEY));
        if cert.exists() && key.exists() {
            let (to_cert, to_key) = tls::made_paths(&appliance.data_dir);
            let certificate = tls::Certificate {
                chain_pem: fs::read(&cert)?,
                key_pem: fs::read(&key)?,
                fingerprint: String::new(),
            };
            tls::save(&to_cert, &to_key, &certificate)?;
            fs::remove_file(&cert)?;
            contents.certificate = true;
        }
        let backdrops = appliance.data_dir.join(BACKDROPS);
        let staged_backdrops = staging.join(BACKDROPS);
        if staged_backdrops.exists() {
            let _ = fs::remove_dir_all(&backdrops);
            contents.backdrops = sorted_entries(&staged_backdrops)?.len();
            fs::rename(&staged_backdrops, &backdrops)?;
        }
        let staged_config = staging.join(CONFIG);
        if staged_config.exists() {
            let config = fs::read(&staged_config)?;
            match put_config(&appliance.config, &config) {
                Ok(()) => contents.config = true,
                Err(e) => {
                    // The service may not write /etc (ProtectSystem=strict):
                    // `sudo cutout restore` can.
                    let kept = appliance.data_dir.join("cutout.toml.from-backup");
                    fs::write(&kept, &config)?;
                    log::warn!(
                        "the backup's configuration is not in place ({e:#}); it is in {}",
                        kept.display()
                    );
                    contents.config_kept_at = Some(kept);
                }
            }
            fs::remove_file(&staged_config)?;
        }
        give_to_the_data_dirs_owner(&appliance.data_dir)?;
        Ok(contents)
    }
}

/// `config` in place of the file at `path`, unless equal; the file it
/// replaces kept beside it.
fn put_config(path: &Path, config: &[u8]) -> Result<()> {
    if fs::read(path).ok().as_deref() == Some(config) {
        return Ok(());
    }
    if !path.parent().is_some_and(|d| d.is_dir()) {
        bail!("no directory for {}", path.display());
    }
    if path.exists() {
        fs::copy(path, format!("{}.before-restore", path.display()))?;
    }
    let partial = format!("{}.partial", path.display());
    fs::write(&partial, config).with_context(|| format!("writing {partial}"))?;
    fs::rename(&partial, path)?;
    Ok(())
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
    let mut paths = vec![data_dir.join(DATABASE)];
    for dir in [data_dir.join("tls"), data_dir.join(BACKDROPS)] {
        if !dir.exists() {
            continue;
        }
        paths.push(dir.clone());
        for entry in sorted_entries(&dir)? {
            paths.extend(sorted_entries(&entry).unwrap_or_default());
            paths.push(entry);
        }
    }
    for path in paths {
        let current = fs::metadata(&path)?;
        if (current.uid(), current.gid()) != (owner.uid(), owner.gid()) {
            std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).with_context(
                || format!("giving {} to the data directory's owner", path.display()),
            )?;
        }
    }
    Ok(())
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
