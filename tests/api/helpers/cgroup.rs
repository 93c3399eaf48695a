//! A memory limit on a process tree (cgroup v1's memory controller, as
//! root): a board's memory, or a unit's `MemoryMax`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A memory cgroup (v1) with a limit; what it starts runs inside it.
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    pub fn new(name: &str, limit_mib: u64) -> Cgroup {
        let dir = Path::new("/sys/fs/cgroup/memory").join(format!("cutout-test-{name}"));
        if dir.exists() {
            // Left by a test run that was killed: emptied and removed, as
            // it would have been.
            drop(Cgroup { dir: dir.clone() });
        }
        std::fs::create_dir(&dir).expect("cgroup v1's memory controller, as root");
        std::fs::write(
            dir.join("memory.limit_in_bytes"),
            (limit_mib << 20).to_string(),
        )
        .unwrap();
        // No swap to spill into, where the kernel accounts for it.
        let _ = std::fs::write(
            dir.join("memory.memsw.limit_in_bytes"),
            (limit_mib << 20).to_string(),
        );
        Cgroup { dir }
    }

    /// `program args…`, started inside the cgroup.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
                self.dir.display()
            ),
        ]);
        command.arg(program);
        command
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap()
    }

    /// The processes the kernel killed for this cgroup's limit.
    pub fn oom_kills(&self) -> u64 {
        let control = self.read("memory.oom_control");
        control
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .expect("a kernel that counts OOM kills (4.13+)")
            .trim()
            .parse()
            .unwrap()
    }

    pub fn peak_mib(&self) -> u64 {
        self.read("memory.max_usage_in_bytes")
            .trim()
            .parse::<u64>()
            .unwrap()
            >> 20
    }

    fn empty(&self) {
        for pid in self.read("cgroup.procs").lines() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.empty();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
