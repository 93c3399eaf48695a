use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufReader, BufWriter, ErrorKind, Read};

use std::net::SocketAddr;
use std::sync::Arc;

use crate::common::{HTTPVersion, Header, HeaderField, Method};
use crate::util::refined_tcp_stream::Stream;
use crate::util::socket::{Socket, MAX_PIPELINED};
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: Option<SocketAddr>,

    // cutout patch 7: the connection's place in the registry of limits
    socket: Arc<Socket>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // cutout patch 9: requests read on this connection
    served: u64,

    // true if the connection goes through SSL
    secure: bool,
}

// cutout patch: bounds on what a client may make us buffer before the body.
const MAX_HEADER_LINE: usize = 8192;
const MAX_HEADERS: usize = 100;
/// cutout patch 9: the whole head, as nginx's four 8 KiB buffers: 100
/// lines of 8 KiB each would let 512 connections hold 400 MB.
const MAX_HEAD: usize = 32 * 1024;
const HEADER_TOO_LARGE: &str = "request header too large";
const MALFORMED: &str = "The request line or a header is malformed.";

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    /// cutout patch 9: a head that breaks HTTP/1.1's grammar, or one that a
    /// proxy in front could read differently (smuggling); the detail says
    /// which. Answered 400, and the connection closed.
    Malformed(&'static str),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
}

impl ClientConnection {
    /// A connection over `stream`, which `socket` carries.
    pub(crate) fn new(stream: Stream, socket: Arc<Socket>) -> ClientConnection {
        let (read_socket, write_socket) = RefinedTcpStream::new(stream);
        let remote_addr = socket.peer_addr();
        let secure = read_socket.secure();

        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            socket,
            next_header_source: first_header,
            no_more_requests: false,
            served: 0,
            secure,
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// cutout patch 9: reads one head line into `head`, with its CRLF. A CR
    /// or LF alone is malformed: servers and proxies disagree on where such
    /// a line ends.
    fn read_line_into(&mut self, head: &mut Vec<u8>) -> Result<(), ReadError> {
        let start = head.len();
        let mut after_cr = false;
        for byte in self.next_header_source.by_ref().bytes() {
            let byte = byte.map_err(ReadError::ReadIoError)?;
            match (after_cr, byte) {
                (true, b'\n') => {
                    head.push(byte);
                    return Ok(());
                }
                (true, _) => return Err(ReadError::Malformed("A CR in the request head is not followed by LF.")),
                (false, b'\n') => return Err(ReadError::Malformed("A line of the request head ends in LF without CR.")),
                _ => {}
            }
            after_cr = byte == b'\r';
            // cutout patch: a line without end would grow without bound.
            if head.len() - start >= MAX_HEADER_LINE {
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::InvalidData,
                    HEADER_TOO_LARGE,
                )));
            }
            head.push(byte);
        }
        Err(ReadError::ReadIoError(IoError::new(
            ErrorKind::ConnectionAborted,
            "Unexpected EOF",
        )))
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        let mut head = Vec::with_capacity(512);
        let mut lines = 0;
        loop {
            let start = head.len();
            self.read_line_into(&mut head)?;
            if head.len() - start == 2 && lines > 0 {
                break;
            }
            lines += 1;
            if lines > MAX_HEADERS + 1 || head.len() > MAX_HEAD {
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::InvalidData,
                    HEADER_TOO_LARGE,
                )));
            }
        }
        let (method, path, version, headers) = parse_head(&head)?;

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            self.remote_addr,
            data_source,
            writer,
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        Ok(request.with_socket(self.socket.clone()))
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }
        // cutout patch 9: a client that hung up (or could not be written
        // to) is owed nothing more, whatever it pipelined before it left.
        if self.served > 0 && self.socket.client_gone() {
            return None;
        }

        let rq = match self.read() {
            Err(ReadError::Malformed(detail)) => {
                let writer = self.sink.next().unwrap();
                let response = json_error(400, "invalid_request", "Invalid request", detail);
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                return None; // we don't know where the next request would start,
                             // se we have to close
            }

            Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::InvalidData => {
                let writer = self.sink.next().unwrap();
                let response = json_error(
                    431,
                    "request_header_fields_too_large",
                    "Request header fields too large",
                    "A request line or header line is over 8 KiB, the whole head over 32 KiB, or there are over 100 headers.",
                );
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                return None;
            }

            Err(ReadError::ReadIoError(ref err))
                if matches!(err.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) =>
            {
                // request timeout
                self.socket.head_timed_out();
                let writer = self.sink.next().unwrap();
                let response = json_error(
                    408,
                    "request_timeout",
                    "Request timeout",
                    "The request headers were not received in time.",
                );
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                return None; // closing the connection
            }

            Err(ReadError::ExpectationFailed(ver)) => {
                let writer = self.sink.next().unwrap();
                let response = Response::new_empty(StatusCode(417));
                response.raw_print(writer, ver, &[], true, None).ok();
                return None; // TODO: should be recoverable, but needs handling in case of body
            }

            Err(ReadError::ReadIoError(_)) => return None,

            Ok(rq) => rq,
        };
        self.served += 1;

        // cutout patch 7: the head is in; the body has its own clock.
        // Patch 9: past a run of pipelined requests, this one is the last.
        if self.socket.busy() >= MAX_PIPELINED {
            self.no_more_requests = true;
        }

        // updating the status of the connection
        let connection_header = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("Connection"))
            .map(|h| h.value.as_str());

        let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

        match lowercase {
            Some(ref val) if val.contains("close") => self.no_more_requests = true,
            Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
            Some(ref val)
                if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
            {
                self.no_more_requests = true
            }
            None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
            _ => (),
        };

        // returning the request
        Some(rq)
    }
}

type Head = (Method, String, HTTPVersion, Vec<Header>);

/// cutout patch 9: a request head (request line and header lines, each
/// ending in CRLF, then an empty line), parsed by `httparse`, hyper's
/// parser: a method token, a target of visible ASCII, HTTP/1.0 or 1.1, and
/// header values without control characters. Then what could be framed
/// two ways is refused: two Content-Length or Host headers, Content-Length
/// beside Transfer-Encoding, a transfer coding other than chunked, a
/// Content-Length that is not a number.
fn parse_head(head: &[u8]) -> Result<Head, ReadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(length)) if length == head.len() => {}
        _ => return Err(ReadError::Malformed(MALFORMED)),
    }
    let method = parsed.method.ok_or(ReadError::Malformed(MALFORMED))?;
    let method: Method = method.parse().map_err(|_| ReadError::Malformed(MALFORMED))?;
    let path = parsed.path.ok_or(ReadError::Malformed(MALFORMED))?;
    if !path.is_ascii() {
        return Err(ReadError::Malformed("The request target is not ASCII."));
    }
    let version = match parsed.version {
        Some(0) => HTTPVersion(1, 0),
        Some(1) => HTTPVersion(1, 1),
        _ => return Err(ReadError::Malformed(MALFORMED)),
    };
    let mut headers = Vec::with_capacity(parsed.headers.len());
    for h in parsed.headers.iter() {
        let field: HeaderField = h.name.parse().map_err(|_| ReadError::Malformed(MALFORMED))?;
        let value = AsciiString::from_ascii(h.value.trim_ascii())
            .map_err(|_| ReadError::Malformed("A header value is not ASCII."))?;
        headers.push(Header { field, value });
    }
    let named = |name: &'static str| -> Vec<&Header> {
        headers.iter().filter(|h| h.field.equiv(name)).collect()
    };
    let (lengths, hosts, codings) = (
        named("Content-Length"),
        named("Host"),
        named("Transfer-Encoding"),
    );
    if lengths.len() > 1 {
        return Err(ReadError::Malformed(
            "The request has more than one Content-Length header.",
        ));
    }
    if hosts.len() > 1 {
        return Err(ReadError::Malformed("The request has more than one Host header."));
    }
    if let Some(length) = lengths.first() {
        let digits = length.value.as_str();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadError::Malformed("The Content-Length is not a number."));
        }
    }
    if let Some(coding) = codings.first() {
        if !lengths.is_empty() {
            return Err(ReadError::Malformed(
                "The request has both Content-Length and Transfer-Encoding.",
            ));
        }
        let chunked = coding.value.as_str().eq_ignore_ascii_case("chunked");
        if !chunked || codings.len() > 1 || version == HTTPVersion(1, 0) {
            return Err(ReadError::Malformed(
                "The only transfer coding taken is chunked, alone, over HTTP/1.1.",
            ));
        }
    }
    let (path, headers) = origin_form(path, headers)?;
    Ok((method, path, version, headers))
}

/// cutout patch 10: an absolute-form target (`http://host/path`, RFC 9112
/// section 3.2.2) becomes its path, and its authority the Host header, in
/// place of any sent: the server is to use the target's host and ignore
/// the header, so every rule about Host applies to it.
fn origin_form(path: &str, mut headers: Vec<Header>) -> Result<(String, Vec<Header>), ReadError> {
    let scheme_end = ["http://", "https://"].iter().find_map(|scheme| {
        let start = path.get(..scheme.len())?;
        start.eq_ignore_ascii_case(scheme).then_some(scheme.len())
    });
    let Some(scheme_end) = scheme_end else {
        return Ok((path.to_owned(), headers));
    };
    let rest = &path[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(authority_end);
    if authority.is_empty() || authority.contains('@') {
        return Err(ReadError::Malformed(
            "An absolute request target needs a host, without user information.",
        ));
    }
    let target = match target.chars().next() {
        Some('/') => target.to_owned(),
        _ => format!("/{target}"),
    };
    headers.retain(|h| !h.field.equiv("Host"));
    let value = AsciiString::from_ascii(authority).map_err(|_| ReadError::Malformed(MALFORMED))?;
    headers.push(Header {
        field: "Host".parse().map_err(|_| ReadError::Malformed(MALFORMED))?,
        value,
    });
    Ok((target, headers))
}

#[cfg(test)]
mod test {
    use super::{parse_head, ReadError};

    #[test]
    fn an_absolute_target_is_its_path_and_its_authority_the_host() {
        for (target, path) in [
            ("http://booth.local:8080/api/remove-bg", "/api/remove-bg"),
            ("HTTPS://booth.local/a?x=1", "/a?x=1"),
            ("http://booth.local", "/"),
            ("http://booth.local?x", "/?x"),
        ] {
            let head = format!("POST {target} HTTP/1.1\r\nHost: elsewhere\r\n\r\n");
            let (_, parsed, _, headers) = parse_head(head.as_bytes()).unwrap();
            assert_eq!(parsed, path, "{target}");
            let hosts: Vec<&str> = headers
                .iter()
                .filter(|h| h.field.equiv("Host"))
                .map(|h| h.value.as_str())
                .collect();
            let authority = target.split('/').nth(2).unwrap().split('?').next().unwrap();
            assert_eq!(hosts, [authority], "{target}");
        }
        assert!(refused("GET http:///a HTTP/1.1\r\n\r\n").contains("needs a host"));
        assert!(refused("GET http://user@h/a HTTP/1.1\r\n\r\n").contains("needs a host"));
    }

    fn refused(head: &str) -> &'static str {
        match parse_head(head.as_bytes()) {
            Err(ReadError::Malformed(why)) => why,
            other => panic!("{:?} was not refused: {:?}", head, other),
        }
    }

    #[test]
    fn a_plain_head_is_parsed() {
        let (method, path, version, headers) =
            parse_head(b"POST /hello?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length:  12 \r\n\r\n")
                .unwrap();
        assert!(method == crate::Method::Post);
        assert_eq!(path, "/hello?x=1");
        assert!(version == crate::common::HTTPVersion(1, 1));
        assert_eq!(headers.len(), 2);
        assert_eq!(headers[1].value.as_str(), "12");
    }

    #[test]
    fn heads_that_could_be_framed_two_ways_are_refused() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        ] {
            refused(head);
        }
    }

    #[test]
    fn control_characters_and_bad_lines_are_refused() {
        for head in [
            "GET /a\x01b HTTP/1.1\r\n\r\n",
            "GET /a b HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\x1bb\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET /hello\r\n\r\n",
            "qsd qsd qsd\r\n\r\n",
        ] {
            refused(head);
        }
    }
}

/// cutout patch 6: what the server answers before a request exists (a
/// malformed or oversized head, or one that stops arriving) carries a JSON
/// body in cutout's error shape, like every error the application sends.
fn json_error(
    status: u16,
    code: &str,
    title: &str,
    detail: &str,
) -> crate::Response<std::io::Cursor<Vec<u8>>> {
    let body =
        format!(r#"{{"errors":[{{"title":"{title}","code":"{code}","detail":"{detail}"}}]}}"#);
    crate::Response::from_data(body.into_bytes())
        .with_status_code(crate::StatusCode(status))
        .with_header(
            crate::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
                .expect("a valid header"),
        )
}

/// cutout patch 8: the answer to plain HTTP sent to the TLS port. The
/// request head is read (up to 16 KiB, within the head deadline) before it
/// is answered: a socket closed with unread bytes is reset, and the reset
/// can reach the client before the answer does.
pub(crate) fn answer_plain_http_on_tls_port(socket: &Socket) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while head.len() < 16 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match (&*socket).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let response = json_error(
        400,
        "https_required",
        "HTTPS required",
        "This port speaks HTTPS: use an https:// address.",
    )
    .with_header(
        crate::Header::from_bytes(&b"Connection"[..], &b"close"[..]).expect("a valid header"),
    );
    response
        .raw_print(socket, HTTPVersion(1, 1), &[], false, None)
        .ok();
    socket.shutdown(std::net::Shutdown::Write).ok();
}
