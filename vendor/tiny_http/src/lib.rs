//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

#[cfg(feature = "ssl-rustls")]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;
pub use util::socket::{ConnectionLimits, ConnectionStats};

mod client;
mod common;
mod connection;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr(), for each listener
    listening_addrs: Vec<ListenAddr>,

    // cutout patch 7: the connections open, and what the limits did
    registry: Arc<util::socket::Registry>,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(feature = "ssl-rustls")]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listeners(
            vec![(listener.into(), ssl_config)],
            ConnectionLimits::default(),
        )
    }

    /// cutout patches 1 and 7: serves every listener (plain or TLS) into
    /// one queue of requests, under one set of connection limits (a socket
    /// timeout among them, so a client that stalls cannot hold a thread).
    pub fn from_listeners(
        listeners: Vec<(Listener, Option<SslConfig>)>,
        limits: ConnectionLimits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        #[cfg(not(feature = "ssl-rustls"))]
        type SslContext = ();
        #[cfg(feature = "ssl-rustls")]
        type SslContext = crate::ssl::SslContextImpl;

        let close = Arc::new(AtomicBool::new(false));
        let messages = MessagesQueue::with_capacity(8);
        let registry = util::socket::Registry::new(limits);
        // A thread per connection, from one pool for every listener.
        let tasks_pool = Arc::new(util::TaskPool::new());
        let mut listening_addrs = Vec::new();
        let mut accepting = Vec::new();
        for (listener, ssl_config) in listeners {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            let ssl: Option<Arc<SslContext>> = match ssl_config {
                #[cfg(feature = "ssl-rustls")]
                Some(config) => Some(Arc::new(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?)),
                #[cfg(not(feature = "ssl-rustls"))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl-rustls` feature in tiny-http"
                        .into(),
                ),
                None => None,
            };
            listening_addrs.push(local_addr);
            accepting.push((listener, ssl));
        }
        for (listener, ssl) in accepting {
            let (close, messages, registry, tasks_pool) = (
                close.clone(),
                messages.clone(),
                registry.clone(),
                tasks_pool.clone(),
            );
            thread::spawn(move || {
                log::debug!("Running accept thread");
                while !close.load(Relaxed) {
                    let (connection, peer) = match listener.accept() {
                        Ok(accepted) => accepted,
                        // cutout patch 2: an accept error (EMFILE,
                        // ECONNABORTED...) is passing; upstream stopped
                        // accepting for good here.
                        Err(e) => {
                            log::error!("Error accepting new client: {}", e);
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    // Past the caps with nothing idle to close: dropped, so closed.
                    let Some(socket) = registry.admit(connection, peer) else {
                        continue;
                    };
                    let (messages, ssl) = (messages.clone(), ssl.clone());
                    let mut task = Some(move || serve_connection(socket, ssl, messages));
                    tasks_pool.spawn(Box::new(move || {
                        if let Some(task) = task.take() {
                            task()
                        }
                    }));
                }
                log::debug!("Terminating accept thread");
            });
        }

        Ok(Server {
            messages,
            close,
            listening_addrs,
            registry,
        })
    }

    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server (its first listener) is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addrs[0].clone()
    }

    /// Where each listener listens, in the order they were given.
    pub fn server_addrs(&self) -> Vec<ListenAddr> {
        self.listening_addrs.clone()
    }

    /// The connections open now, and what the limits did so far.
    pub fn connection_stats(&self) -> ConnectionStats {
        self.registry.stats()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock each accept thread
        for listening_addr in &self.listening_addrs {
            let maybe_stream = match listening_addr {
                ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
                #[cfg(unix)]
                ListenAddr::Unix(addr) => {
                    // TODO: use connect_addr when its stabilized.
                    let path = addr.as_pathname().unwrap();
                    std::os::unix::net::UnixStream::connect(path).map(Connection::from)
                }
            };
            if let Ok(stream) = maybe_stream {
                let _ = stream.shutdown(Shutdown::Both);
            }

            #[cfg(unix)]
            if let ListenAddr::Unix(addr) = listening_addr {
                if let Some(path) = addr.as_pathname() {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

/// A connection's thread: TLS if its listener has it, then each request
/// in turn. The next head is read only once the previous request is
/// answered, so a connection that waits for a head owes its client
/// nothing and may be closed to make room (cutout patch 7).
fn serve_connection<Ssl: SslAccept>(
    socket: Arc<util::socket::Socket>,
    ssl: Option<Arc<Ssl>>,
    messages: Arc<MessagesQueue<Message>>,
) {
    if socket.set_timeouts().is_err() {
        return;
    }
    let stream = match ssl {
        None => util::refined_tcp_stream::Stream::Http(socket.clone()),
        Some(ssl) => match ssl.accept_or_explain(&socket) {
            Some(stream) => stream,
            None => return,
        },
    };
    let client = ClientConnection::new(stream, socket.clone());
    let (sender, receiver) = mpsc::channel();
    for rq in client {
        messages.push(rq.with_notify_sender(sender.clone()).into());
        if receiver.recv().is_err() {
            return;
        }
        socket.waiting();
    }
    socket.close_gracefully();
}

/// How a listener's connections begin: plain HTTP at once, TLS after its
/// handshake.
trait SslAccept: Send + Sync + 'static {
    fn accept_or_explain(
        &self,
        socket: &Arc<util::socket::Socket>,
    ) -> Option<util::refined_tcp_stream::Stream>;
}

impl SslAccept for () {
    fn accept_or_explain(
        &self,
        socket: &Arc<util::socket::Socket>,
    ) -> Option<util::refined_tcp_stream::Stream> {
        Some(util::refined_tcp_stream::Stream::Http(socket.clone()))
    }
}

#[cfg(feature = "ssl-rustls")]
impl SslAccept for crate::ssl::SslContextImpl {
    /// cutout patch 8: a client that speaks plain HTTP to the TLS port
    /// (its first byte a letter, where TLS starts with 0x16) gets a plain
    /// answer that says so, not a handshake failure it cannot read.
    fn accept_or_explain(
        &self,
        socket: &Arc<util::socket::Socket>,
    ) -> Option<util::refined_tcp_stream::Stream> {
        const TLS_HANDSHAKE: u8 = 0x16;
        match socket.peek_first_byte() {
            Ok(Some(TLS_HANDSHAKE)) => self.accept(socket.clone()).ok().map(Into::into),
            Ok(Some(byte)) if byte.is_ascii_alphabetic() => {
                client::answer_plain_http_on_tls_port(socket);
                None
            }
            _ => None,
        }
    }
}
