//! The data directory fills up or turns read-only under a running server:
//! calls get 503 and cost nothing, the log says why once, and service comes
//! back by itself. The directory is a small ext4 file system on a loop
//! device, mounted with `errors=remount-ro` as a Pi's root is, so these
//! tests need root (as CI, and `make test-deb` before it, already have). A
//! card too small for a backup refuses it on the setup page.

use crate::backup::{cutout, noise_backdrops, stderr, SetupPage, PASSPHRASE};
use crate::helpers::*;
use cutout::store::Store;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

struct Ext4 {
    dir: tempfile::TempDir,
    device: String,
}

impl Ext4 {
    fn new(mib: u64) -> Ext4 {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
        );
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        let mut fs = Ext4 {
            dir,
            device: String::new(),
        };
        fs.mount();
        fs
    }

    fn mount(&mut self) {
        let (image, at) = (self.dir.path().join("fs.img"), self.path());
        let options = "loop,errors=remount-ro".as_ref();
        run(
            "mount",
            &["-o".as_ref(), options, image.as_os_str(), at.as_os_str()],
        );
        let source = Command::new("findmnt")
            .args(["-n", "-o", "SOURCE"])
            .arg(&at)
            .output()
            .unwrap();
        let device = String::from_utf8(source.stdout).unwrap();
        self.device = device.trim().trim_start_matches("/dev/").to_owned();
    }

    /// Unmounts and mounts the image again, as a reboot would.
    fn remount(&mut self) {
        run("umount", &[self.path().as_os_str()]);
        self.mount();
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// What the kernel does on an I/O error: the file system turns
    /// read-only under the processes that have files open on it.
    fn fail(&self) {
        std::fs::write(
            format!("/sys/fs/ext4/{}/trigger_fs_error", self.device),
            "test\n",
        )
        .unwrap();
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(
        status.success(),
        "{program} {args:?} (this test needs root)"
    );
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Writes into `path` until the file system refuses more.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![1u8; 256 * 1024];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
}

/// Calls until one answers `status`; returns how many were served (200),
/// since each of those was charged.
fn call_until(what: &str, call: &dyn Fn() -> Reply, status: u16) -> u32 {
    let mut served = 0;
    for _ in 0..50 {
        let reply = call();
        served += u32::from(reply.status == 200);
        if reply.status == status {
            return served;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting until {what}");
}

#[test]
fn a_full_or_read_only_data_directory_answers_503_logs_once_and_recovers() {
    assert!(
        running_as_root(),
        "this test mounts an ext4 image, which needs root: run it as root \
         (`make test` and CI do), or leave it out as `make check` does"
    );
    let mut fs = Ext4::new(48);
    let data = fs.path().join("data");
    let key = cli_account(&data, "acme", "pro");
    let server = Server::start(&data, "info", &[]);
    let call = || {
        post_form(
            server.addr,
            Some(&key),
            Multipart::new().file("image_file", &jpeg(64, 48)),
        )
    };
    let refused = |fault: &str, cause: &str| {
        for _ in 0..5 {
            let reply = call();
            assert_eq!(
                (reply.status, reply.error_code().as_str()),
                (503, "service_unavailable"),
                "{fault}"
            );
            assert!(reply.header("retry-after").is_some());
        }
        let ready = request(server.addr, "GET", "/readyz", &[], b"");
        assert_eq!(ready.status, 503);
        assert!(ready.text().contains(cause), "{}", ready.text());
    };
    let mut served = call_until("the first call is served", &call, 200);

    let filler = fs.path().join("filler");
    fill(&filler);
    // The check is cached for two seconds, so a call may still get through.
    served += call_until("calls are refused on a full disk", &call, 503);
    refused("full", "is full");
    std::fs::remove_file(&filler).unwrap();
    served += call_until("calls are served once there is room", &call, 200);

    fs.fail();
    served += call_until("calls are refused on a read-only disk", &call, 503);
    refused("read-only", "I/O error");

    let log = std::fs::read_to_string(&server.log).unwrap();
    server.kill_9();
    let said = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(said("cannot take writes"), 2, "once per fault:\n{log}");
    assert_eq!(said("takes writes again"), 1, "once on recovery:\n{log}");
    assert_eq!(
        said("remove-bg refused"),
        0,
        "no line per refused call:\n{log}"
    );

    // Every charge made is on the disk: mount it again and count.
    fs.remount();
    let store = cutout::store::SqliteStore::open(&data).unwrap();
    let month = cutout::domain::Month::of_unix(cutout::clock::Clock::default().now_unix());
    let acme = store.account("acme").unwrap();
    assert_eq!(
        store.usage(acme.id, month).unwrap(),
        served,
        "refused calls cost nothing"
    );
}

#[test]
fn the_setup_page_refuses_a_backup_the_card_has_no_room_for_and_keeps_nothing() {
    let root = tempfile::tempdir().unwrap();
    let old = root.path().join("old");
    std::fs::create_dir_all(&old).unwrap();
    cli_account(&old, "booth", "pro");
    noise_backdrops(&old, 3);
    let file = root.path().join("old.backup");
    let out = cutout(&old, &["backup", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let backup = std::fs::read(&file).unwrap();
    // A card with under 100 MB free: the 29 MB backup needs 2x29 + 67.
    let card = Ext4::new(100);
    let new = card.path().join("data");
    let setup = SetupPage::open(&new);
    let refused = setup.restore(&backup, PASSPHRASE);
    assert_eq!(refused.status, 507, "{}", refused.text());
    assert!(
        refused
            .text()
            .contains("restoring this 29 MB backup needs about 12"),
        "{}",
        refused.text()
    );
    let left = dot_files(&new);
    assert!(left.is_empty(), "{left:?}");
    drop(setup);
}
