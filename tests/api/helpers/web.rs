//! A web server on a loopback address, as a camera's snapshot URL, a NAS
//! or a booth's own server is on the LAN: what `image_url` and
//! `bg_image_url` fetch from. tiny_http, each request on its own thread,
//! so that one that never answers holds up no other.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// What a path answers.
#[derive(Clone)]
pub enum Answer {
    File(Vec<u8>),
    Status(u16),
    /// 302 to this URL.
    Redirect(String),
    /// Takes the request and says nothing for a minute.
    Silent,
    /// Declares `.0` bytes and sends one a second.
    Drip(usize),
    /// The file gzipped, with `Content-Encoding: gzip`.
    Gzipped(Vec<u8>),
}

pub struct WebServer {
    pub addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    /// Requests received, of any path.
    hits: Arc<AtomicUsize>,
}

impl WebServer {
    /// Serves `routes` on `ip` (any of 127.0.0.0/8) at a free port; any
    /// other path is 404.
    pub fn start(ip: [u8; 4], routes: Vec<(&str, Answer)>) -> WebServer {
        let server = Arc::new(tiny_http::Server::http((IpAddr::from(ip), 0)).unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let routes: Vec<(String, Answer)> = routes
            .into_iter()
            .map(|(path, answer)| (path.to_owned(), answer))
            .collect();
        let (serving, counting) = (server.clone(), hits.clone());
        thread::spawn(move || {
            while let Ok(request) = serving.recv() {
                counting.fetch_add(1, Ordering::SeqCst);
                let answer = routes
                    .iter()
                    .find(|(path, _)| path == request.url())
                    .map_or(Answer::Status(404), |(_, answer)| answer.clone());
                thread::spawn(move || respond(request, answer));
            }
        });
        WebServer { addr, server, hits }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

fn respond(request: tiny_http::Request, answer: Answer) {
    let header = |name: &str, value: &str| {
        tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap()
    };
    let sent = match answer {
        Answer::File(bytes) => request.respond(tiny_http::Response::from_data(bytes)),
        Answer::Status(code) => request.respond(tiny_http::Response::empty(code)),
        Answer::Redirect(to) => {
            request.respond(tiny_http::Response::empty(302).with_header(header("Location", &to)))
        }
        Answer::Gzipped(bytes) => {
            use std::io::Write;
            let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gzip.write_all(&bytes).unwrap();
            let body = gzip.finish().unwrap();
            request.respond(
                tiny_http::Response::from_data(body)
                    .with_header(header("Content-Encoding", "gzip")),
            )
        }
        Answer::Silent => {
            thread::sleep(Duration::from_secs(60));
            Ok(())
        }
        Answer::Drip(length) => request.respond(tiny_http::Response::new(
            200.into(),
            vec![header("Content-Type", "image/jpeg")],
            Drip,
            Some(length),
            None,
        )),
    };
    sent.ok();
}

/// A byte a second, for ever.
struct Drip;

impl Read for Drip {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        thread::sleep(Duration::from_secs(1));
        buf[0] = 0xFF;
        Ok(1)
    }
}
