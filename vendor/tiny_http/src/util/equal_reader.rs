use std::io::Read;
use std::io::Result as IoResult;
use std::sync::mpsc::channel;
use std::sync::mpsc::{Receiver, Sender};

/// A `Reader` that reads exactly the number of bytes from a sub-reader.
///
/// If the limit is reached, it returns EOF. If the limit is not reached
/// when the destructor is called, the remaining bytes will be read and
/// thrown away.
pub struct EqualReader<R>
where
    R: Read,
{
    reader: R,
    size: usize,
    last_read_signal: Sender<IoResult<()>>,
}

impl<R> EqualReader<R>
where
    R: Read,
{
    pub fn new(reader: R, size: usize) -> (EqualReader<R>, Receiver<IoResult<()>>) {
        let (tx, rx) = channel();

        let r = EqualReader {
            reader,
            size,
            last_read_signal: tx,
        };

        (r, rx)
    }
}

impl<R> Read for EqualReader<R>
where
    R: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        if self.size == 0 {
            return Ok(0);
        }

        let buf = if buf.len() < self.size {
            buf
        } else {
            &mut buf[..self.size]
        };

        match self.reader.read(buf) {
            Ok(len) => {
                self.size -= len;
                Ok(len)
            }
            err @ Err(_) => err,
        }
    }
}

impl<R> Drop for EqualReader<R>
where
    R: Read,
{
    fn drop(&mut self) {
        // cutout patch: upstream allocated the whole unread remainder at once
        // (a lying Content-Length became a multi-gigabyte allocation) and
        // read it all. Now a bounded drain; past it, the connection is not
        // reused (the next request line fails to parse and it is closed).
        // A remainder past the bound is not worth a worker's time at all.
        let result = if self.size as u64 > DRAIN_MAX_BYTES {
            Ok(())
        } else {
            drain_bounded(&mut (&mut self.reader).take(self.size as u64)).map(|_| ())
        };
        self.last_read_signal.send(result).ok();
    }
}

/// cutout patch: how much of an unread request body is read and thrown away
/// after the response, so the client sees the response rather than a reset
/// and a keep-alive connection stays usable.
const DRAIN_MAX_BYTES: u64 = 16 * 1024 * 1024;
const DRAIN_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and discards from `reader` until EOF, `DRAIN_MAX_BYTES` or
/// `DRAIN_MAX_TIME`, whichever comes first; returns the bytes discarded.
pub(crate) fn drain_bounded<R: Read>(reader: &mut R) -> std::io::Result<u64> {
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16 * 1024];
    let mut total = 0u64;
    while total < DRAIN_MAX_BYTES && started.elapsed() < DRAIN_MAX_TIME {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::EqualReader;
    use std::io::Read;

    #[test]
    fn test_limit() {
        use std::io::Cursor;

        let mut org_reader = Cursor::new("hello world".to_string().into_bytes());

        {
            let (mut equal_reader, _) = EqualReader::new(org_reader.by_ref(), 5);

            let mut string = String::new();
            equal_reader.read_to_string(&mut string).unwrap();
            assert_eq!(string, "hello");
        }

        let mut string = String::new();
        org_reader.read_to_string(&mut string).unwrap();
        assert_eq!(string, " world");
    }

    #[test]
    fn test_not_enough() {
        use std::io::Cursor;

        let mut org_reader = Cursor::new("hello world".to_string().into_bytes());

        {
            let (mut equal_reader, _) = EqualReader::new(org_reader.by_ref(), 5);

            let mut vec = [0];
            equal_reader.read_exact(&mut vec).unwrap();
            assert_eq!(vec[0], b'h');
        }

        let mut string = String::new();
        org_reader.read_to_string(&mut string).unwrap();
        assert_eq!(string, " world");
    }
}
