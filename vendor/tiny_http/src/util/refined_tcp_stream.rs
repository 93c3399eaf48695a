use std::io::Result as IoResult;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::Arc;

#[cfg(feature = "ssl-rustls")]
use crate::ssl::SslStream;
use crate::util::socket::Socket;

// cutout patch 7: both halves share one socket (an `Arc`); upstream
// duplicated the file descriptor, and unwrapped the result.
#[derive(Clone)]
pub(crate) enum Stream {
    Http(Arc<Socket>),
    #[cfg(feature = "ssl-rustls")]
    Https(SslStream),
}

impl Stream {
    fn secure(&self) -> bool {
        match self {
            Stream::Http(_) => false,
            #[cfg(feature = "ssl-rustls")]
            Stream::Https(_) => true,
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(socket) => socket.shutdown(how),
            #[cfg(feature = "ssl-rustls")]
            Stream::Https(ssl_stream) => ssl_stream.shutdown(how),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(socket) => (&**socket).read(buf),
            #[cfg(feature = "ssl-rustls")]
            Stream::Https(ssl_stream) => ssl_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(socket) => (&**socket).write(buf),
            #[cfg(feature = "ssl-rustls")]
            Stream::Https(ssl_stream) => ssl_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(socket) => (&**socket).flush(),
            #[cfg(feature = "ssl-rustls")]
            Stream::Https(ssl_stream) => ssl_stream.flush(),
        }
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
}

impl RefinedTcpStream {
    pub(crate) fn new(stream: Stream) -> (RefinedTcpStream, RefinedTcpStream) {
        let read = RefinedTcpStream {
            stream: stream.clone(),
            close_read: true,
            close_write: false,
        };

        let write = RefinedTcpStream {
            stream,
            close_read: false,
            close_write: true,
        };

        (read, write)
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        self.stream.read(buf)
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
