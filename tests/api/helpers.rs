//! What every API test uses: `spawn_app` starts the real app on port 0 with
//! a fresh data directory; `post_image` speaks HTTP over a plain socket, so
//! the tests see exactly what a client would.

use cutout::clock::Clock;
use cutout::config::Settings;
use cutout::domain::AccountName;
use cutout::engine::{self, Engine, EngineChoice, Manifest};
use cutout::http::AppState;
use cutout::store::Store;
use cutout::{App, EngineSource, ShutdownHandle};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

/// 2026-03-15T12:00:00Z
pub const MID_MARCH: i64 = 1_773_576_000;

pub fn models_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

/// The real U2NetP model, loaded once for the whole test binary.
pub fn u2netp() -> Arc<dyn Engine> {
    static ENGINE: OnceLock<Arc<dyn Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let manifest = Manifest::builtin();
            let spec = manifest.model(Some("u2netp")).unwrap();
            engine::load(spec, &models_dir(), &EngineChoice::default())
                .expect("models/u2netp.onnx (run `make models`)")
        })
        .clone()
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub store: Store,
    pub now: Arc<AtomicI64>,
    pub shutdown: ShutdownHandle,
    pub state: Arc<AppState>,
    _data_dir: tempfile::TempDir,
    server: Option<thread::JoinHandle<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.shutdown();
        if let Some(server) = self.server.take() {
            server.join().ok();
        }
    }
}

pub fn spawn_app() -> TestApp {
    spawn_app_with(EngineSource::Ready(u2netp()), |_| {})
}

pub fn spawn_app_with(engine: EngineSource, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = env_logger::builder().is_test(true).try_init();
    }
    let data_dir = tempfile::tempdir().unwrap();
    let (clock, now) = Clock::manual(MID_MARCH);
    let mut settings = Settings {
        data_dir: data_dir.path().to_owned(),
        models_dir: models_dir(),
        listen: "127.0.0.1:0".into(),
        model: Some("u2netp".into()),
        clock,
        shutdown_grace: Duration::from_secs(30),
        ..Settings::default()
    };
    tweak(&mut settings);
    let app = App::build(settings, engine).unwrap();
    let (addr, shutdown, state) = (app.addr(), app.shutdown_handle(), app.state());
    let server = thread::spawn(move || app.run());
    let store = Store::open(data_dir.path()).unwrap();
    TestApp {
        addr,
        store,
        now,
        shutdown,
        state,
        _data_dir: data_dir,
        server: Some(server),
    }
}

impl TestApp {
    /// The data directory, `cutout.db` in it.
    pub fn data_dir(&self) -> &std::path::Path {
        self._data_dir.path()
    }

    /// A new account on `plan` and one key for it.
    pub fn account(&self, name: &str, plan: &str) -> String {
        self.store
            .create_account(&AccountName::parse(name).unwrap(), plan, MID_MARCH)
            .unwrap();
        self.store
            .create_key(name, "test", MID_MARCH)
            .unwrap()
            .expose()
            .to_owned()
    }

    pub fn in_flight(&self, name: &str) -> u32 {
        self.state
            .limiter
            .in_flight(self.store.account(name).unwrap().id)
    }

    pub fn used(&self, name: &str) -> u32 {
        let account = self.store.account(name).unwrap();
        let month =
            cutout::domain::Month::of_unix(self.now.load(std::sync::atomic::Ordering::SeqCst));
        self.store.usage(account.id, month).unwrap()
    }

    pub fn post_image(&self, key: Option<&str>, image: &[u8], size: Option<&str>) -> Reply {
        let mut form = Multipart::new();
        form.file("image_file", image);
        if let Some(size) = size {
            form.text("size", size);
        }
        self.post_form(key, &form)
    }

    pub fn post_form(&self, key: Option<&str>, form: &Multipart) -> Reply {
        post_form(self.addr, key, form)
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Reply {
        request(self.addr, method, path, headers, body)
    }
}

pub fn post_form(addr: SocketAddr, key: Option<&str>, form: &Multipart) -> Reply {
    let mut headers = vec![("Content-Type".to_owned(), form.content_type())];
    if let Some(key) = key {
        headers.push(("X-Api-Key".to_owned(), key.to_owned()));
    }
    request(addr, "POST", "/api/remove-bg", &headers, &form.body())
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    request_from(None, addr, method, path, headers, body)
}

/// `request` from the local address `source` (any of 127.0.0.0/8 reaches
/// a server on 127.0.0.1), so a test can be several clients.
pub fn request_from(
    source: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    let raw = raw_request(addr, method, path, headers, body);
    send_raw_from(source, addr, &raw)
}

/// A request's bytes, as a client sends them to `addr`.
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// Writes `raw` to the server and reads the whole response.
pub fn send_raw(addr: SocketAddr, raw: &[u8]) -> Reply {
    send_raw_from(None, addr, raw)
}

fn connect_from(source: Option<std::net::IpAddr>, addr: SocketAddr) -> TcpStream {
    let Some(source) = source else {
        return TcpStream::connect(addr).unwrap();
    };
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(source, 0).into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    socket.into()
}

fn send_raw_from(source: Option<std::net::IpAddr>, addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = connect_from(source, addr);
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    // The server may answer (413) and close before the body is all sent.
    let _ = stream.write_all(raw);
    read_reply(&mut stream)
}

/// Reads a response as a client does: the head, then Content-Length bytes
/// (or the chunked body up to its last chunk), not until the server closes.
/// A read that fails ends it, with what came before.
pub fn read_reply(stream: &mut impl Read) -> Reply {
    let mut response = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !Reply::complete(&response) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
    Reply::parse(&response)
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn complete(raw: &[u8]) -> bool {
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let body = &raw[end + 4..];
        if let Some(len) = head.lines().find_map(|l| l.strip_prefix("content-length:")) {
            return body.len() >= len.trim().parse::<usize>().unwrap();
        }
        head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n")
    }

    pub fn parse(raw: &[u8]) -> Reply {
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a complete response head");
        let head = String::from_utf8_lossy(&raw[..end]);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut body = raw[end + 4..].to_vec();
        if let Some((_, len)) = headers.iter().find(|(k, _)| k == "content-length") {
            body.truncate(len.parse().unwrap());
        }
        if headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
        {
            body = dechunk(&body);
        }
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.all_headers(name).first().copied()
    }

    /// The error code of a JSON error body, checking its documented shape.
    pub fn error_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "status {}",
            self.status
        );
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        let e = &v["errors"][0];
        assert!(e["title"].is_string() && e["detail"].is_string(), "{v}");
        e["code"].as_str().unwrap().to_owned()
    }

    pub fn png(&self) -> image::RgbaImage {
        assert_eq!(self.status, 200, "{}", String::from_utf8_lossy(&self.body));
        assert_eq!(self.header("content-type"), Some("image/png"));
        let decoded =
            image::load_from_memory_with_format(&self.body, image::ImageFormat::Png).unwrap();
        assert_eq!(decoded.color(), image::ColorType::Rgba8);
        decoded.into_rgba8()
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

pub struct Multipart {
    boundary: String,
    parts: Vec<u8>,
}

impl Multipart {
    pub fn new() -> Multipart {
        Multipart {
            boundary: "cutoutTestBoundary7MA4YWxk".into(),
            parts: Vec::new(),
        }
    }

    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.part(
            &format!(
                "name=\"{name}\"; filename=\"photo.bin\"\r\nContent-Type: application/octet-stream"
            ),
            data,
        )
    }

    pub fn text(&mut self, name: &str, value: &str) -> &mut Self {
        self.part(&format!("name=\"{name}\""), value.as_bytes())
    }

    fn part(&mut self, disposition: &str, data: &[u8]) -> &mut Self {
        let head = format!(
            "--{}\r\nContent-Disposition: form-data; {disposition}\r\n\r\n",
            self.boundary
        );
        self.parts.extend_from_slice(head.as_bytes());
        self.parts.extend_from_slice(data);
        self.parts.extend_from_slice(b"\r\n");
        self
    }

    pub fn content_type(&self) -> String {
        format!("multipart/form-data; boundary={}", self.boundary)
    }

    pub fn body(&self) -> Vec<u8> {
        let mut body = self.parts.clone();
        body.extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        body
    }
}

/// An engine that holds every run until `open` is called, so tests can put
/// a known number of requests in flight without depending on timing.
#[derive(Default)]
pub struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

pub struct GatedEngine(pub Arc<Gate>);

impl Engine for GatedEngine {
    fn name(&self) -> &'static str {
        "gated test engine"
    }

    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
        let mut open = self.0.open.lock().unwrap();
        while !*open {
            open = self.0.changed.wait(open).unwrap();
        }
        drop(open);
        u2netp().run(input, width, height)
    }
}

/// Waits until `done` holds; panics after a generous minute so a broken
/// build fails rather than hangs. No assertion depends on how long it took.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

// ---- images ----

pub fn rgb_photo(w: u32, h: u32) -> image::RgbImage {
    // A bright disc on a dark, textured background: something to cut out.
    image::RgbImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as f32 - w as f32 / 2.0, y as f32 - h as f32 / 2.0);
        if dx * dx + dy * dy < (w.min(h) as f32 / 3.0).powi(2) {
            image::Rgb([230, 60, 40])
        } else {
            image::Rgb([20 + (x % 7) as u8, 40, 30 + (y % 5) as u8])
        }
    })
}

pub fn encode(image: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

pub fn jpeg(w: u32, h: u32) -> Vec<u8> {
    encode(
        &image::DynamicImage::ImageRgb8(rgb_photo(w, h)),
        image::ImageFormat::Jpeg,
    )
}

pub fn png(w: u32, h: u32) -> Vec<u8> {
    encode(
        &image::DynamicImage::ImageRgb8(rgb_photo(w, h)),
        image::ImageFormat::Png,
    )
}

// ---- the dashboard, as a browser would use it ----

/// A client with a cookie jar that does not follow redirects, so each test
/// sees every status and `Location`.
pub struct Browser {
    addr: SocketAddr,
    source: Option<std::net::IpAddr>,
    cookies: Mutex<Vec<(String, String)>>,
    extra: Vec<(String, String)>,
}

impl Browser {
    pub fn new(app: &TestApp) -> Browser {
        Browser::at(app.addr)
    }

    /// A browser for a server started some other way (`Server`).
    pub fn at(addr: SocketAddr) -> Browser {
        Browser {
            addr,
            source: None,
            cookies: Mutex::default(),
            extra: vec![],
        }
    }

    /// A browser that connects from `source`, one of 127.0.0.0/8.
    pub fn with_address(mut self, source: std::net::IpAddr) -> Browser {
        self.source = Some(source);
        self
    }

    /// A browser that sends `name: value` on every request.
    pub fn with_header(mut self, name: &str, value: &str) -> Browser {
        self.extra.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.cookies.lock().unwrap();
        cookies
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    pub fn set_cookie(&self, name: &str, value: &str) {
        let mut cookies = self.cookies.lock().unwrap();
        cookies.retain(|(k, _)| k != name);
        cookies.push((name.to_owned(), value.to_owned()));
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        mut headers: Vec<(String, String)>,
        body: &[u8],
    ) -> Reply {
        let jar = self.cookies.lock().unwrap().clone();
        if !jar.is_empty() {
            let line: Vec<_> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
            headers.push(("Cookie".into(), line.join("; ")));
        }
        headers.push(("Accept".into(), "text/html".into()));
        headers.extend(self.extra.iter().cloned());
        let reply = request_from(self.source, self.addr, method, path, &headers, body);
        for set in reply.headers.iter().filter(|(k, _)| k == "set-cookie") {
            let (name, rest) = set.1.split_once('=').unwrap();
            let value = rest.split(';').next().unwrap();
            let deleted = set.1.contains("Max-Age=0");
            let mut cookies = self.cookies.lock().unwrap();
            cookies.retain(|(k, _)| k != name);
            if !deleted {
                cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        reply
    }

    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, vec![], b"")
    }

    /// Posts a URL-encoded form.
    pub fn post(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let headers = vec![(
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        )];
        self.send("POST", path, headers, body.as_bytes())
    }

    pub fn post_multipart(&self, path: &str, form: &Multipart) -> Reply {
        let headers = vec![("Content-Type".into(), form.content_type())];
        self.send("POST", path, headers, &form.body())
    }

    /// The CSRF token in the form on the page at `path`.
    pub fn csrf(&self, path: &str) -> String {
        csrf_in(&self.get(path))
    }

    pub fn sign_in(&self, name: &str, password: &str) -> Reply {
        let csrf = self.csrf("/login");
        self.post(
            "/login",
            &[("csrf", &csrf), ("name", name), ("password", password)],
        )
    }
}

pub fn csrf_in(reply: &Reply) -> String {
    let html = reply.text();
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field in: {html}"));
    html[at + 19..at + 19 + 64].to_owned()
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `Set-Cookie` header that sets cookie `name`.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}=");
        self.all_headers("set-cookie")
            .into_iter()
            .find(|c| c.starts_with(&prefix))
    }

    pub fn all_headers(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

pub const ADMIN_PASSWORD: &str = "operator password";
pub const USER_PASSWORD: &str = "booth owner password";

impl TestApp {
    pub fn set_admin_password(&self) {
        let hash = cutout::secrets::hash_password(ADMIN_PASSWORD);
        self.store.set_admin_password(&hash, MID_MARCH).unwrap();
    }

    /// An account on `plan` whose user can sign in with `USER_PASSWORD`,
    /// and one key for it.
    pub fn account_with_login(&self, name: &str, plan: &str) -> String {
        let key = self.account(name, plan);
        let hash = cutout::secrets::hash_password(USER_PASSWORD);
        self.store.set_account_password(name, &hash).unwrap();
        key
    }

    pub fn admin(&self) -> Browser {
        self.set_admin_password();
        let browser = Browser::new(self);
        assert_eq!(browser.sign_in("admin", ADMIN_PASSWORD).status, 303);
        browser
    }

    pub fn user(&self, name: &str) -> Browser {
        let browser = Browser::new(self);
        let reply = browser.sign_in(name, USER_PASSWORD);
        assert_eq!(reply.status, 303, "{}", reply.text());
        browser
    }
}

/// A PNG whose header declares `w`×`h` and whose data is a few bytes: it
/// must be refused from the header, before any pixel buffer exists.
pub fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    png_of_chunks(
        w,
        h,
        &[(
            *b"IDAT",
            vec![0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        )],
    )
}

/// An 8-bit RGB PNG: the signature, IHDR for `w`×`h`, `chunks` as given
/// (with correct CRCs) and IEND.
pub fn png_of_chunks(w: u32, h: u32, chunks: &[([u8; 4], Vec<u8>)]) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    for (kind, data) in chunks {
        chunk(&mut out, kind, data);
    }
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The `cutout` binary serving U2NetP on a free port of 127.0.0.1, with
/// its log (stderr) in a file: what systemd runs, so a test can measure its
/// memory, read its log or kill it.
pub struct Server {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// Outside the data directory, which a test may fill or make read-only.
    pub log: std::path::PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Server {
    /// Serves `data` with `RUST_LOG=rust_log`; `extra` are more `serve` options.
    pub fn start(data: &std::path::Path, rust_log: &str, extra: &[&str]) -> Server {
        Server::start_with(data, &models_dir(), rust_log, extra, &[])
    }

    /// `start` with another models directory and more environment.
    pub fn start_with(
        data: &std::path::Path,
        models: &std::path::Path,
        rust_log: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        let command = std::process::Command::new(env!("CARGO_BIN_EXE_cutout"));
        Server::spawn(command, data, models, rust_log, extra, env)
    }

    /// `start` under a limit of `files` open files, as a unit's
    /// `LimitNOFILE` sets it.
    pub fn start_with_open_files(data: &std::path::Path, rust_log: &str, files: u32) -> Server {
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            &format!("ulimit -n {files} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_cutout"),
        ]);
        Server::spawn(command, data, &models_dir(), rust_log, &[], &[])
    }

    fn spawn(
        mut command: std::process::Command,
        data: &std::path::Path,
        models: &std::path::Path,
        rust_log: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        use std::os::unix::net::UnixDatagram;
        std::fs::create_dir_all(data).unwrap();
        let socket = data.join("notify");
        let _ = std::fs::remove_file(&socket);
        let notify = UnixDatagram::bind(&socket).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("cutout.log");
        let child = command
            .arg("--data-dir")
            .arg(data)
            .arg("--models-dir")
            .arg(models)
            .args(["serve", "--listen", "127.0.0.1:0", "--model", "u2netp"])
            .args(extra)
            .env("NOTIFY_SOCKET", &socket)
            .env("CUTOUT_MDNS_ENABLED", "false")
            .env("RUST_LOG", rust_log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        // READY comes with "serving model … on ADDR" or "degraded: … on ADDR".
        let mut buf = [0u8; 512];
        let addr = loop {
            let n = notify.recv(&mut buf).expect("READY within two minutes");
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message.starts_with("READY=1\n") {
                let (_, addr) = message.rsplit_once(" on ").expect("an address");
                break addr.trim().parse().unwrap();
            }
        };
        Server {
            child,
            addr,
            log,
            _log_dir: log_dir,
        }
    }

    /// The resident set now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id()).expect("the server is running")
    }

    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident set of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs the `cutout` command line on `data`; returns its stdout.
pub fn cutout_cli(data: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cutout"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "cutout {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A new account on `plan` with one key, made with the command line.
pub fn cli_account(data: &std::path::Path, name: &str, plan: &str) -> String {
    cutout_cli(data, &["account", "create", name, "--plan", plan]);
    let out = cutout_cli(data, &["key", "create", name]);
    out.lines().last().unwrap().trim().to_owned()
}
