//! Sustained load on the binary: 4 clients over 3 accounts and all three
//! sizes, every reply a 200, and memory and open files flat after warm-up.
//! A minute here (a growth shows within its last 40 s); `make soak` runs
//! it for 30 minutes (`SOAK_SECS`). The engine is ONNX Runtime, which makes
//! five times the calls of tract in a test build; `SOAK_ENGINE=tract` soaks
//! the other.

use crate::helpers::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The mean and the maximum of one window of samples.
fn window(samples: &[u64]) -> (f64, u64) {
    let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64;
    (mean, samples.iter().copied().max().unwrap_or(0))
}

#[test]
fn four_clients_for_minutes_get_only_200s_with_memory_and_files_flat() {
    // Not CUTOUT_*: the server inherits this environment and refuses
    // CUTOUT_ variables it does not know.
    let seconds: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let data = tempfile::tempdir().unwrap();
    let keys: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|name| cli_account(data.path(), name, "business"))
        .collect();
    let engine = std::env::var("SOAK_ENGINE").unwrap_or("onnxruntime".into());
    let server = Server::start(data.path(), "warn", &["--engine", &engine]);
    let photos = [
        jpeg(640, 480),
        png(800, 600),
        encode(
            &image::DynamicImage::ImageRgb8(rgb_photo(480, 640)),
            image::ImageFormat::WebP,
        ),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let unexpected = Arc::new(Mutex::new(vec![]));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let key = keys[client % keys.len()].clone();
            let (photos, stop, unexpected, calls) = (
                photos.clone(),
                stop.clone(),
                unexpected.clone(),
                calls.clone(),
            );
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut n = client;
                while !stop.load(Ordering::Relaxed) {
                    let size = ["auto", "preview", "full"][n % 3];
                    let mut form = Multipart::new();
                    form.file("image_file", &photos[n % photos.len()])
                        .text("size", size);
                    let reply = post_form(addr, Some(&key), &form);
                    if reply.status != 200 {
                        unexpected.lock().unwrap().push((size, reply.status));
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();

    // A third of the run warms up (the model's buffers, the allocator's
    // arenas, SQLite's cache); then the first and the last fifth of the
    // rest are compared.
    let started = Instant::now();
    let warm_up = Duration::from_secs(seconds / 3);
    let (mut rss, mut files) = (vec![], vec![]);
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(500));
        if started.elapsed() > warm_up {
            rss.push(server.rss_kib());
            files.push(open_files(server.child.id()) as u64);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    let calls = calls.load(Ordering::Relaxed);
    assert!(
        unexpected.lock().unwrap().is_empty(),
        "{:?}",
        unexpected.lock().unwrap()
    );
    let fifth = rss.len() / 5;
    let (rss_first, rss_last) = (window(&rss[..fifth]), window(&rss[rss.len() - fifth..]));
    let (files_first, files_last) = (
        window(&files[..fifth]),
        window(&files[files.len() - fifth..]),
    );
    eprintln!(
        "soak on {engine}: {calls} calls in {seconds} s; RSS mean {:.0} -> {:.0} KiB; open files max {} -> {}",
        rss_first.0, rss_last.0, files_first.1, files_last.1
    );
    assert!(calls >= 20, "only {calls} calls");
    assert!(
        rss_last.0 <= rss_first.0 * 1.05,
        "RSS grew from {:.0} to {:.0} KiB",
        rss_first.0,
        rss_last.0
    );
    // Each client's connection comes and goes, so the peaks are compared.
    assert!(
        files_last.1 as f64 <= (files_first.1 as f64 * 1.05).ceil(),
        "open files grew from {} to {}",
        files_first.1,
        files_last.1
    );
}
