//! The `cutout` command: parses the command line and maps errors to exit
//! codes (2: bad arguments, 1: the command failed). The work is in the
//! library, the commands in `cli.rs`.

use clap::Parser;
use cutout::cli::{run, Cli};

/// Rust's blocks of 1 MiB or more are mappings of their own, reused inside
/// a tract run (allocator.rs); glibc keeps the small ones.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: cutout::allocator::Allocator = cutout::allocator::Allocator;

/// For what is allocated through malloc itself (ONNX Runtime, SQLite):
/// glibc raises its mmap threshold each time a large buffer is freed (up
/// to 32 MiB), after which large buffers, ONNX Runtime's activations among
/// them, are carved from its heap arenas, and what they free there stays
/// with the process. A fixed 1 MiB threshold keeps every such buffer in its
/// own mapping, handed back on free: with IS-Net on onnxruntime, idle RSS went
/// from 942 to 689 MiB and the peak under 50 uploads from 1857 to 987 MiB
/// (BENCHMARKS.md, "glibc's mmap threshold"). The arenas keep up to 32 MiB free before handing
/// memory back (128 KiB by default): a 12 MP cut-out is made in bands whose
/// buffers, under 1 MiB each, were faulted in afresh band after band, and
/// its compose took 10,000 page faults, now 2,800.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn map_large_buffers_apart() {
    // SAFETY: mallopt only sets an allocator parameter; called first
    // thing in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn map_large_buffers_apart() {}

/// Rust ignores SIGPIPE, so a command's output piped into `head` made its
/// next print panic. A command ends as other Unix tools do instead: quietly,
/// by the signal. The server keeps ignoring it: a client gone mid-answer is
/// that request's error, not the end of the service.
fn end_quietly_when_the_reader_goes() {
    // SAFETY: sets a signal's disposition to the default, before any other
    // thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// What the appliance writes holds secrets (the database and its journal,
/// the TLS key, a backup's plain copies on their way, uploads): created
/// readable by its owner alone, whatever umask it was started with, never
/// widened or narrowed afterwards. `cutout remove` writes the caller's
/// cut-outs, as the caller's umask says.
fn create_files_private() {
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe {
        libc::umask(0o077);
    }
}

fn main() {
    map_large_buffers_apart();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!("error: a subcommand is missing (see --help)");
            std::process::exit(2);
        }
        Err(e) => {
            let first = e
                .render()
                .to_string()
                .lines()
                .next()
                .unwrap_or("error: bad arguments")
                .to_owned();
            eprintln!("{first} (see --help)");
            std::process::exit(2);
        }
    };
    if !cli.serves() {
        end_quietly_when_the_reader_goes();
    }
    if !cli.writes_the_callers_files() {
        create_files_private();
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let code = match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    cutout::engine::exit_leaving_the_libraries(code)
}
