//! HTTP over a plain socket, as a client speaks it, so the tests see
//! exactly what a client would: requests, raw bytes, replies, multipart forms.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

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

/// A connection from the local address `from` to `to`, or `None` where it
/// could not be made within 2 s (a server past its caps closes it).
pub fn try_connect_from(from: std::net::IpAddr, to: SocketAddr) -> Option<TcpStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    socket
        .bind(&SockAddr::from(SocketAddr::new(from, 0)))
        .ok()?;
    socket
        .connect_timeout(&SockAddr::from(to), Duration::from_secs(2))
        .ok()?;
    Some(socket.into())
}

fn send_raw_from(source: Option<std::net::IpAddr>, addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = match source {
        None => TcpStream::connect(addr).unwrap(),
        Some(source) => try_connect_from(source, addr).expect("a connection"),
    };
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

    /// The detail of a JSON error body.
    pub fn error_detail(&self) -> String {
        self.error_code();
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        v["errors"][0]["detail"].as_str().unwrap().to_owned()
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
