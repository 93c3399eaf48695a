//! Hostile input against the binary as systemd runs it: every malformed
//! request and decompression bomb gets its documented 4xx within 2 s, the
//! server's memory stays within 300 MiB of idle while it handles them, and
//! slow clients do not keep a normal one from being served.

use crate::helpers::*;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A zlib stream of `len` zero bytes, made of one 1 MiB block repeated:
/// with a full flush after each block the compressor's output for the same
/// input repeats, so a gigabyte costs a megabyte and no time.
fn zeros_deflated(len: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    const BLOCK: usize = 1 << 20;
    let zeros = vec![0u8; BLOCK];
    let mut compress = Compress::new(Compression::best(), true);
    let mut step = |input: &[u8], flush| {
        let mut out = Vec::with_capacity(64 * 1024);
        let before = compress.total_in();
        compress.compress_vec(input, &mut out, flush).unwrap();
        assert_eq!(compress.total_in() - before, input.len() as u64);
        out
    };
    let mut stream = step(&zeros[..len % BLOCK], FlushCompress::Full);
    let first = step(&zeros, FlushCompress::Full);
    let repeated = step(&zeros, FlushCompress::Full);
    assert_eq!(
        first, repeated,
        "a flushed block of zeros compresses the same each time"
    );
    for _ in 0..len / BLOCK {
        stream.extend_from_slice(&repeated);
    }
    // The Adler-32 trailer covers only what was compressed; PNG decoders
    // stop at the image's last row and never reach it.
    stream.extend(step(&[], FlushCompress::Finish));
    stream
}

/// RGB rows of zeros for a `w`×`h` PNG, each with its filter byte.
fn png_pixels(w: u32, h: u32) -> usize {
    (w as usize * 3 + 1) * h as usize
}

fn jpeg_with_size(width: u16, height: u16) -> Vec<u8> {
    let mut bytes = jpeg(64, 48);
    let sof = bytes
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .expect("a baseline JPEG");
    bytes[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    bytes[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    bytes
}

/// A JPEG carrying `segments` APP1 (EXIF) segments of 64 KiB each.
fn jpeg_with_exif(segments: usize) -> Vec<u8> {
    let photo = jpeg(640, 480);
    let mut out = photo[..2].to_vec();
    for _ in 0..segments {
        out.extend_from_slice(&[0xFF, 0xE1, 0xFF, 0xFF]);
        out.extend_from_slice(b"Exif\0\0");
        out.extend(std::iter::repeat_n(0x4D, 0xFFFF - 2 - 6));
    }
    out.extend_from_slice(&photo[2..]);
    out
}

struct Case {
    name: &'static str,
    request: Vec<u8>,
    expect: (u16, &'static str),
}

fn upload(key: &str, name: &'static str, image: &[u8], expect: (u16, &'static str)) -> Case {
    let form = Multipart::new().file("image_file", image).body();
    Case {
        name,
        request: raw_post(key, &Multipart::new().content_type(), &form),
        expect,
    }
}

fn raw(name: &'static str, request: Vec<u8>, expect: (u16, &'static str)) -> Case {
    Case {
        name,
        request,
        expect,
    }
}

fn raw_post(key: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Api-Key: {key}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn hostile_cases(key: &str) -> Vec<Case> {
    let mut truncated_jpeg = jpeg(640, 480);
    truncated_jpeg.truncate(truncated_jpeg.len() / 2);
    let mut truncated_png = png(640, 480);
    truncated_png.truncate(truncated_png.len() / 2);
    let webp = encode(
        &image::DynamicImage::ImageRgb8(rgb_photo(320, 240)),
        image::ImageFormat::WebP,
    );
    let mut truncated_webp = webp.clone();
    truncated_webp.truncate(webp.len() / 2);
    let mut corrupt_webp = webp.clone();
    corrupt_webp[21..40].fill(0xFF);
    let mut corrupt_jpeg = jpeg(640, 480);
    let sof = corrupt_jpeg
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .unwrap();
    corrupt_jpeg[sof + 9] = 0; // no components
    let mut corrupt_png = png(640, 480);
    let middle = corrupt_png.len() / 2;
    corrupt_png[middle..middle + 64].fill(0xAA);

    let idat = |w, h, extra: usize| (*b"IDAT", zeros_deflated(png_pixels(w, h) + extra));
    let mut iccp = b"bomb\0\0".to_vec();
    iccp.extend(zeros_deflated(2 << 30));
    let mut ztxt = b"Comment\0\0".to_vec();
    ztxt.extend(zeros_deflated(2 << 30));
    let mut text = b"Comment\0".to_vec();
    text.extend(std::iter::repeat_n(b'a', 9 << 20));

    let bad = (400, "invalid_image");
    let too_large = (400, "image_too_large");
    let mut chunked = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\nContent-Type: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        Multipart::new().content_type()
    )
    .into_bytes();
    // 14.4 MB: over the cap of a body (a 10 MiB image in base64, and the form).
    for _ in 0..220 {
        chunked.extend_from_slice(b"10000\r\n");
        chunked.extend(std::iter::repeat_n(b'x', 0x10000));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    // A chunk-size line that never ends: 4 MB of hex digits.
    let mut endless_size =
        chunked[..chunked.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4].to_vec();
    endless_size.extend(std::iter::repeat_n(b'f', 4 << 20));
    let form = Multipart::new().file("image_file", &jpeg(64, 48)).body();
    let mut lying_length = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Api-Key: {key}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
        Multipart::new().content_type(),
        form.len() / 2
    )
    .into_bytes();
    lying_length.extend_from_slice(&form);
    // RFC 7578: a part's own Content-Length is not one of its headers, and
    // is ignored; the boundary ends the part.
    let lying_part = [
        b"--fuzz\r\nContent-Disposition: form-data; name=\"image_file\"; filename=\"a.jpg\"\r\nContent-Length: 999999999\r\n\r\n".to_vec(),
        jpeg(64, 48),
        b"\r\n--fuzz--\r\n".to_vec(),
    ]
    .concat();
    let long_header = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(9 * 1024)
    );
    let long_head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\n{}\r\n",
        format!("X-Padding: {}\r\n", "a".repeat(8000)).repeat(5)
    );
    let long_line = format!(
        "GET /?{} HTTP/1.1\r\nHost: t\r\n\r\n",
        "a".repeat(64 * 1024)
    );

    vec![
        upload(key, "zero-byte file", b"", bad),
        upload(key, "truncated JPEG", &truncated_jpeg, bad),
        upload(key, "truncated PNG", &truncated_png, bad),
        upload(key, "truncated WEBP", &truncated_webp, bad),
        upload(key, "JPEG with a broken frame header", &corrupt_jpeg, bad),
        upload(key, "PNG with damaged data", &corrupt_png, bad),
        upload(key, "WEBP with a damaged header", &corrupt_webp, bad),
        upload(
            key,
            "PNG declaring 30000x30000",
            &png_header_only(30_000, 30_000),
            too_large,
        ),
        upload(
            key,
            "JPEG declaring 65500x65500",
            &jpeg_with_size(65_500, 65_500),
            too_large,
        ),
        upload(
            key,
            "20000x20000 PNG whose IDAT inflates to 1.2 GB",
            &png_of_chunks(20_000, 20_000, &[idat(20_000, 20_000, 0)]),
            too_large,
        ),
        raw(
            "body over the cap sent chunked",
            chunked,
            (413, "file_too_large"),
        ),
        raw(
            "a chunk-size line of 4 MB",
            endless_size,
            (400, "invalid_request"),
        ),
        raw(
            "Content-Length shorter than the form",
            lying_length,
            (400, "invalid_request"),
        ),
        raw(
            "a part declaring a Content-Length of 1 GB",
            raw_post(key, "multipart/form-data; boundary=fuzz", &lying_part),
            (200, ""),
        ),
        raw(
            "multipart without a boundary",
            raw_post(key, "multipart/form-data", &form),
            (400, "invalid_request"),
        ),
        raw(
            "multipart with a boundary the body never uses",
            raw_post(key, "multipart/form-data; boundary=nothere", &form),
            (400, "invalid_request"),
        ),
        raw(
            "two image_file parts",
            raw_post(
                key,
                &Multipart::new().content_type(),
                &Multipart::new()
                    .file("image_file", &jpeg(8, 8))
                    .file("image_file", &jpeg(8, 8))
                    .body(),
            ),
            (400, "invalid_request"),
        ),
        raw(
            "a 9 KiB header line",
            long_header.into_bytes(),
            (431, "request_header_fields_too_large"),
        ),
        raw(
            "a 40 KiB head of 8 KiB lines",
            long_head.into_bytes(),
            (431, "request_header_fields_too_large"),
        ),
        raw(
            "a 64 KiB request line",
            long_line.into_bytes(),
            (431, "request_header_fields_too_large"),
        ),
        // Data past what the image needs, and metadata nobody reads, do not
        // make a photo unusable: the decoder stops at the last row and
        // inflates an ICC profile only up to 32 MiB before dropping it.
        upload(
            key,
            "PNG whose IDAT inflates to 2 GB past its last row",
            &png_of_chunks(640, 480, &[idat(640, 480, 2 << 30)]),
            (200, ""),
        ),
        upload(
            key,
            "PNG with an ICC profile inflating to 2 GB",
            &png_of_chunks(640, 480, &[(*b"iCCP", iccp), idat(640, 480, 0)]),
            (200, ""),
        ),
        upload(
            key,
            "PNG with a zTXt chunk inflating to 2 GB",
            &png_of_chunks(640, 480, &[(*b"zTXt", ztxt), idat(640, 480, 0)]),
            (200, ""),
        ),
        upload(
            key,
            "PNG with a 9 MiB tEXt chunk",
            &png_of_chunks(640, 480, &[(*b"tEXt", text), idat(640, 480, 0)]),
            (200, ""),
        ),
        upload(
            key,
            "JPEG with 9.4 MiB of EXIF",
            &jpeg_with_exif(150),
            (200, ""),
        ),
    ]
}

#[test]
fn hostile_uploads_get_their_4xx_within_2_s_and_memory_stays_bounded() {
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "acme", "business");
    let cases = hostile_cases(&key);
    let server = Server::start(data.path(), "warn", &[]);
    let idle = server.rss_kib();

    let peak = Arc::new(AtomicU64::new(idle));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, pid) = (peak.clone(), done.clone(), server.child.id());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(rss) = rss_kib(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut failures = vec![];
    for case in &cases {
        let started = Instant::now();
        let reply = send_raw(server.addr, &case.request);
        let took = started.elapsed();
        let code = if reply.status == 200 {
            String::new()
        } else {
            reply.error_code()
        };
        // A refusal within 2 s; a photo that is served spends its time in
        // the model, and only its decode is held to 2 s. Not a speed
        // target: a decoder that stops at its limits takes milliseconds, one
        // that inflates the 2 GB it is offered takes far longer than 2 s.
        let refused_or_decoded_in = match reply.status {
            200 => decode_time(&reply),
            _ => took,
        };
        if (reply.status, code.as_str()) != case.expect
            || refused_or_decoded_in > Duration::from_secs(2)
        {
            failures.push(format!(
                "{}: {} {code:?} in {took:?}, expected {:?} within 2 s ({:?})",
                case.name,
                reply.status,
                case.expect,
                reply.header("server-timing")
            ));
        }
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        peak <= idle + 300 * 1024,
        "peak RSS {peak} KiB against idle {idle} KiB"
    );
    eprintln!("idle RSS {idle} KiB, peak while hostile {peak} KiB");
    assert_eq!(post_image_to(server.addr, &key, &jpeg(64, 48)).status, 200);
}

fn decode_time(reply: &Reply) -> Duration {
    let timing = reply.header("server-timing").expect("Server-Timing");
    let ms: f64 = timing
        .split(", ")
        .find_map(|step| step.strip_prefix("decode;dur="))
        .and_then(|ms| ms.parse().ok())
        .expect("a decode step");
    Duration::from_secs_f64(ms / 1000.0)
}

fn post_image_to(addr: std::net::SocketAddr, key: &str, image: &[u8]) -> Reply {
    post_form(addr, Some(key), Multipart::new().file("image_file", image))
}

/// Holds a connection open, sending `head` one byte a second, then (if it
/// gets that far) the body the same way.
fn trickle(addr: std::net::SocketAddr, head: String, stop: Arc<AtomicBool>) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return;
    };
    for byte in head.bytes().chain(std::iter::repeat(b'x')) {
        if stop.load(Ordering::Relaxed) || stream.write_all(&[byte]).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_hundred_slow_clients_do_not_keep_a_normal_one_from_being_served() {
    let data = tempfile::tempdir().unwrap();
    let slow_key = cli_account(data.path(), "slowpoke", "pro");
    let key = cli_account(data.path(), "acme", "pro");
    let server = Server::start(data.path(), "warn", &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = vec![];
    for i in 0..100 {
        // Slow headers, slow bodies without a key, slow bodies with one.
        let head = match i % 3 {
            0 => format!("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {slow_key}\r\n"),
            1 => "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000\r\n\r\n--b\r\n".to_owned(),
            _ => format!("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {slow_key}\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000\r\n\r\n--b\r\n"),
        };
        let (addr, stop) = (server.addr, stop.clone());
        slow.push(std::thread::spawn(move || trickle(addr, head, stop)));
    }
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..3 {
        let started = Instant::now();
        let reply = post_image_to(server.addr, &key, &jpeg(640, 480));
        assert_eq!(
            reply.status,
            200,
            "{:?}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
}
