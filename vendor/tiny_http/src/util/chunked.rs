//! cutout patch 9: a chunked request body, decoded with bounds on its
//! framing. `chunked_transfer`'s decoder buffered a chunk-size line until
//! its CR came, so one client sending hex digits at LAN speed grew the
//! server's memory without end; here a size line (with its extensions) may
//! be 1 KiB and the trailers 8 KiB, and a CR or LF alone is malformed.

use std::convert::TryFrom;
use std::io::{Error as IoError, ErrorKind, Read, Result as IoResult};

const MAX_SIZE_LINE: usize = 1024;
const MAX_TRAILERS: usize = 8 * 1024;

pub struct ChunkedReader<R> {
    source: R,
    state: State,
}

enum State {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes of it left.
    Data(u64),
    /// The last chunk and the trailers are read.
    Done,
}

impl<R: Read> ChunkedReader<R> {
    pub fn new(source: R) -> ChunkedReader<R> {
        ChunkedReader {
            source,
            state: State::Size,
        }
    }

    /// One line, without its CRLF, of at most `most` bytes.
    fn line(&mut self, most: usize) -> IoResult<Vec<u8>> {
        let mut line = Vec::new();
        loop {
            match self.byte()? {
                b'\r' => {
                    return match self.byte()? {
                        b'\n' => Ok(line),
                        _ => Err(malformed("a CR without LF")),
                    }
                }
                b'\n' => return Err(malformed("an LF without CR")),
                _ if line.len() == most => return Err(malformed("a line too long")),
                byte => line.push(byte),
            }
        }
    }

    fn byte(&mut self) -> IoResult<u8> {
        let mut byte = [0u8];
        loop {
            match self.source.read(&mut byte) {
                Ok(0) => {
                    return Err(IoError::new(
                        ErrorKind::UnexpectedEof,
                        "the chunked body ended early",
                    ))
                }
                Ok(_) => return Ok(byte[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next chunk's size; past the last chunk, the trailers are read.
    fn next_size(&mut self) -> IoResult<u64> {
        let line = self.line(MAX_SIZE_LINE)?;
        let digits = line.split(|b| *b == b';').next().unwrap_or_default();
        let digits = std::str::from_utf8(digits)
            .map_err(|_| malformed("a chunk size that is not hex"))?
            .trim_matches(|c| c == ' ' || c == '\t');
        if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed("a chunk size that is not hex"));
        }
        let size =
            u64::from_str_radix(digits, 16).map_err(|_| malformed("a chunk size that is not hex"))?;
        if size == 0 {
            let mut trailers = 0;
            loop {
                let line = self.line(MAX_TRAILERS)?;
                trailers += line.len() + 2;
                if line.is_empty() {
                    break;
                }
                if trailers > MAX_TRAILERS {
                    return Err(malformed("trailers too long"));
                }
            }
        }
        Ok(size)
    }
}

impl<R: Read> Read for ChunkedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        loop {
            match self.state {
                State::Done => return Ok(0),
                State::Size => {
                    self.state = match self.next_size()? {
                        0 => State::Done,
                        size => State::Data(size),
                    }
                }
                State::Data(0) => {
                    if !self.line(0)?.is_empty() {
                        return Err(malformed("a chunk longer than its size"));
                    }
                    self.state = State::Size;
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(0);
                    }
                    let most = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.source.read(&mut buf[..most])?;
                    if n == 0 {
                        return Err(IoError::new(
                            ErrorKind::UnexpectedEof,
                            "the chunked body ended early",
                        ));
                    }
                    self.state = State::Data(left - n as u64);
                    return Ok(n);
                }
            }
        }
    }
}

fn malformed(what: &str) -> IoError {
    IoError::new(
        ErrorKind::InvalidInput,
        format!("malformed chunked body: {}", what),
    )
}

#[cfg(test)]
mod tests {
    use super::ChunkedReader;
    use std::io::Read;

    fn decode(body: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        ChunkedReader::new(body).read_to_end(&mut out).map(|_| out)
    }

    #[test]
    fn chunks_extensions_and_trailers_decode() {
        let body = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        assert_eq!(decode(body).unwrap(), b"hello world");
        let mut reader = ChunkedReader::new(&body[..]);
        reader.read_to_end(&mut Vec::new()).unwrap();
        let mut rest = Vec::new();
        reader.source.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"NEXT", "the next request is left where it starts");
        assert_eq!(decode(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(), b"0123456789");
    }

    #[test]
    fn framing_past_its_bounds_or_malformed_is_refused() {
        let endless_size = format!("{}\r\n", "f".repeat(2000));
        let endless_extension = format!("5;{}\r\nhello\r\n0\r\n\r\n", "x".repeat(2000));
        let long_trailers = format!("0\r\n{}\r\n\r\n", "X-A: b\r\n".repeat(2000));
        for body in [
            endless_size.as_bytes(),
            endless_extension.as_bytes(),
            long_trailers.as_bytes(),
            b"5\r\nhello world\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"x\r\nhello\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"ffffffffffffffff\r\n",
            b"5\r\nhel",
            b"",
        ] {
            assert!(decode(body).is_err(), "{:?}", String::from_utf8_lossy(body));
        }
    }
}
