//! cutout patch 7: what one client may hold.
//!
//! Every accepted connection is one `Socket`, shared by its reading and
//! writing halves through an `Arc` (upstream duplicated the file descriptor
//! for the second half and panicked when that failed: about 510 idle
//! connections under a 1,024 open-file limit stopped the accept thread for
//! good). A `Registry` caps the connections open in all and per client
//! address. A new connection past a cap takes the place of a busy one whose
//! client has hung up, else of the idle one that has waited longest for a
//! request head; where none is idle it is closed at once. Idle: its
//! previous response is sent and its thread is blocked reading an empty
//! socket, so it holds nothing a client is owed (a new connection whose
//! request is there but not yet read is not idle). A connection serving
//! requests pipelined behind one another (each head there before the
//! previous answer was sent) can be closed the same way: its client is not
//! waiting on the answer being written. A request head must arrive whole
//! within a deadline, and a body at a minimum rate within a deadline of
//! its own, however slowly their bytes trickle in. A client that has hung
//! up, or whose answer could not be written, is served no further request.

use std::collections::HashMap;
use std::io::{Error as IoError, ErrorKind, Read, Result as IoResult, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::connection::Connection;

/// What a client may hold, for `Server::from_listeners`.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Read and write timeout of every socket: a client that sends nothing
    /// for this long is dropped.
    pub socket_timeout: Option<Duration>,
    /// From the moment a connection waits for a request head (its accept,
    /// or the previous response sent) until the head has arrived whole.
    pub head_deadline: Duration,
    /// Connections open at once, over all clients.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 address
    /// counts by its /64, which one host may use all of).
    pub max_per_address: usize,
    /// A request body has this long from its first byte read, plus a second
    /// for every `body_min_rate` bytes that arrived, up to `body_deadline`
    /// in all; then its reads fail `TimedOut` (the application's 408). An
    /// answer has the same from its first byte written, then the
    /// connection is dropped.
    pub body_grace: Duration,
    pub body_min_rate: u64,
    pub body_deadline: Duration,
}

/// Requests answered in a row without the client waiting for an answer
/// (pipelined); the last is answered and the connection closed.
pub(crate) const MAX_PIPELINED: u64 = 16;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            socket_timeout: Some(Duration::from_secs(30)),
            head_deadline: Duration::from_secs(10),
            max_connections: 512,
            max_per_address: 64,
            body_grace: Duration::from_secs(10),
            body_min_rate: 16 * 1024,
            body_deadline: Duration::from_secs(120),
        }
    }
}

/// Counters of what the limits did, since the server started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Connections open now.
    pub open: u64,
    /// Connections closed at once: a cap was reached and none was idle.
    pub refused: u64,
    /// Idle connections closed to make room for a new one.
    pub evicted: u64,
    /// Request heads that did not arrive in time (answered 408).
    pub head_timeouts: u64,
}

pub(crate) struct Registry {
    limits: ConnectionLimits,
    open: Mutex<HashMap<u64, Entry>>,
    next_id: AtomicU64,
    refused: AtomicU64,
    evicted: AtomicU64,
    head_timeouts: AtomicU64,
}

struct Entry {
    address: Option<IpAddr>,
    /// Since when it waits for a request head; `None` while a request is
    /// being read or answered.
    waiting_since: Option<Instant>,
    /// Since when it serves requests its client sent without waiting for
    /// their answers; `None` once a head had to be waited for.
    pipelined_since: Option<Instant>,
    /// Chosen to make room; its thread is ending.
    evicted: bool,
    /// Its thread is inside a read of the socket.
    reading: Arc<AtomicBool>,
    socket: Weak<Socket>,
}

impl Registry {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Registry> {
        Arc::new(Registry {
            limits,
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            head_timeouts: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            open: self.lock().len() as u64,
            refused: self.refused.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
            head_timeouts: self.head_timeouts.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a new connection in, making room by closing idle ones where a
    /// cap is reached; `None` (and the connection closed) where no room
    /// can be made.
    pub(crate) fn admit(
        self: &Arc<Self>,
        connection: Connection,
        peer: Option<SocketAddr>,
    ) -> Option<Arc<Socket>> {
        let address = peer.map(|p| address_key(p.ip()));
        let socket = Arc::new(Socket {
            connection,
            peer,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            registry: self.clone(),
            head_deadline: Mutex::new(None),
            reading: Arc::new(AtomicBool::new(false)),
            head_from_socket: AtomicBool::new(false),
            answering: AtomicBool::new(false),
            bytes_behind_answer: AtomicBool::new(false),
            heads: AtomicU64::new(0),
            in_a_row: AtomicU64::new(0),
            body: Mutex::new(BodyClock::default()),
            answer: Mutex::new(BodyClock::default()),
            answering_request: AtomicBool::new(false),
            broken: AtomicBool::new(false),
        });
        let mut victims = Vec::new();
        // Sockets upgraded to be looked at, dropped outside the lock: a last
        // reference leaves the registry as it drops.
        let mut looked_at = Vec::new();
        let admitted = {
            let mut open = self.lock();
            let now = Instant::now();
            let room_from = |open: &mut HashMap<u64, Entry>,
                             victims: &mut Vec<Arc<Socket>>,
                             looked_at: &mut Vec<Arc<Socket>>,
                             same: &dyn Fn(&Entry) -> bool,
                             cap: usize| {
                let live = open.values().filter(|e| !e.evicted && same(e)).count();
                if live < cap {
                    return true;
                }
                // First one whose client has hung up: it is owed nothing.
                // Only busy ones are asked: an idle one's thread, blocked
                // in a read, sees the hang-up itself and ends.
                let idle = |e: &Entry| e.waiting_since.is_some() && e.reading.load(Ordering::Relaxed);
                for entry in open.values_mut().filter(|e| !e.evicted && same(e) && !idle(e)) {
                    let Some(socket) = entry.socket.upgrade() else {
                        continue;
                    };
                    if socket.client_gone() {
                        entry.evicted = true;
                        victims.push(socket);
                        return true;
                    }
                    looked_at.push(socket);
                }
                // Then the one idle or pipelining the longest.
                let idle_since = |e: &Entry| e.waiting_since.filter(|_| idle(e)).or(e.pipelined_since);
                let oldest = open
                    .iter_mut()
                    .filter(|(_, e)| !e.evicted && same(e))
                    .filter_map(|(_, e)| Some((idle_since(e)?, e)))
                    .min_by_key(|(since, _)| *since);
                if let Some((_, entry)) = oldest {
                    entry.evicted = true;
                    victims.extend(entry.socket.upgrade());
                    return true;
                }
                false
            };
            let admitted = room_from(
                &mut open,
                &mut victims,
                &mut looked_at,
                &|e| e.address == address,
                self.limits.max_per_address,
            ) && room_from(
                &mut open,
                &mut victims,
                &mut looked_at,
                &|_| true,
                self.limits.max_connections,
            );
            if admitted {
                open.insert(
                    socket.id,
                    Entry {
                        address,
                        waiting_since: Some(now),
                        pipelined_since: None,
                        evicted: false,
                        reading: socket.reading.clone(),
                        socket: Arc::downgrade(&socket),
                    },
                );
            }
            admitted
        };
        // Outside the lock: a victim whose last reference is this one
        // leaves the registry as it drops.
        drop(looked_at);
        self.evicted
            .fetch_add(victims.len() as u64, Ordering::Relaxed);
        for victim in victims {
            victim.connection.shutdown(Shutdown::Both).ok();
        }
        if admitted {
            socket.waiting();
            Some(socket)
        } else {
            self.refused.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    pub(crate) fn head_timed_out(&self) {
        self.head_timeouts.fetch_add(1, Ordering::Relaxed);
    }
}

/// The address a client is counted under: IPv4 as it is, IPv6 by its /64.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0])
            }
        },
    }
}

/// One accepted connection, shared by everything that reads or writes it.
pub(crate) struct Socket {
    connection: Connection,
    peer: Option<SocketAddr>,
    id: u64,
    registry: Arc<Registry>,
    /// Set while a request head is awaited: reads past it fail `TimedOut`.
    head_deadline: Mutex<Option<Instant>>,
    /// A thread is inside a read of the socket (blocked, when it is empty).
    reading: Arc<AtomicBool>,
    /// Some of the awaited head was read from the socket, not all from
    /// what an earlier read had buffered.
    head_from_socket: AtomicBool,
    /// The answer to the request read last has begun.
    answering: AtomicBool,
    /// When that answer began, the client had sent more: it did not wait.
    bytes_behind_answer: AtomicBool,
    /// Request heads read on this connection.
    heads: AtomicU64,
    /// Requests in a row, each head there before the previous answer was
    /// sent, counting the one before them.
    in_a_row: AtomicU64,
    body: Mutex<BodyClock>,
    answer: Mutex<BodyClock>,
    /// Between a request's head and the next wait for one: what is written
    /// answers a request, on `answer`'s clock. (A TLS handshake, or an
    /// answer to a head that never came, has the socket timeout alone.)
    answering_request: AtomicBool,
    /// A write failed: the client cannot be answered any more.
    broken: AtomicBool,
}

/// How much of a request body has arrived, or of its answer has been
/// written, and since when.
#[derive(Default)]
struct BodyClock {
    /// Its first read or write; `None` until then (the application may
    /// wait for room before it reads a body).
    started: Option<Instant>,
    bytes: u64,
}

impl Socket {
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> IoResult<()> {
        self.connection.shutdown(how)
    }

    /// Waiting for a request head, from now: the deadline runs, and the
    /// connection may be closed to make room for another.
    pub(crate) fn waiting(&self) {
        let now = Instant::now();
        if self.answering_request.swap(false, Ordering::Relaxed) {
            self.connection
                .set_write_timeout(self.registry.limits.socket_timeout)
                .ok();
        }
        self.head_from_socket.store(false, Ordering::Relaxed);
        *self.head_deadline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(now + self.registry.limits.head_deadline);
        if let Some(entry) = self.registry.lock().get_mut(&self.id) {
            entry.waiting_since = Some(now);
        }
    }

    /// A request head has arrived: the body's clock applies from its first
    /// read. Returns how many requests in a row, this one included, its
    /// client sent without waiting for an answer (each head there before
    /// the previous answer was sent).
    pub(crate) fn busy(&self) -> u64 {
        *self.head_deadline.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.body.lock().unwrap_or_else(|p| p.into_inner()) = BodyClock::default();
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = BodyClock::default();
        self.answering_request.store(true, Ordering::Relaxed);
        self.connection
            .set_read_timeout(self.registry.limits.socket_timeout)
            .ok();
        let first = self.heads.fetch_add(1, Ordering::Relaxed) == 0;
        // Pipelined: this head came before the previous answer went out,
        // with it in the socket or already read along with the request
        // before.
        let pipelined = self.bytes_behind_answer.swap(false, Ordering::Relaxed)
            || !self.head_from_socket.load(Ordering::Relaxed);
        self.answering.store(false, Ordering::Relaxed);
        let in_a_row = if first || !pipelined {
            self.in_a_row.store(1, Ordering::Relaxed);
            1
        } else {
            self.in_a_row.fetch_add(1, Ordering::Relaxed) + 1
        };
        if let Some(entry) = self.registry.lock().get_mut(&self.id) {
            entry.waiting_since = None;
            entry.pipelined_since = match in_a_row {
                1 => None,
                _ => entry.pipelined_since.or(Some(Instant::now())),
            };
        }
        in_a_row
    }

    /// The client has hung up (or reset the connection), or an answer to
    /// it could not be written: nothing more it asked for can reach it.
    /// Requests it pipelined before hanging up are still in the socket;
    /// this looks past them.
    pub fn client_gone(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
            || self
                .poll_now(PollFlags::RDHUP)
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR)
    }

    /// What `poll(2)` says of the socket now, for `events`, without waiting.
    fn poll_now(&self, events: PollFlags) -> PollFlags {
        let mut fds = [PollFd::new(&self.connection, events)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&now)) {
            Ok(1..) => fds[0].revents(),
            _ => PollFlags::empty(),
        }
    }

    /// cutout patch 9: ends a connection the server is done with while
    /// its client may still be sending (past a malformed head, past a run
    /// of pipelined requests). Closed at once with bytes unread, the socket
    /// would be reset, and the reset can reach the client before the last
    /// answer does; so the server's side is shut first and what still
    /// comes is read and dropped, for at most a second and 64 KiB.
    pub(crate) fn close_gracefully(&self) {
        if self.client_gone() || self.connection.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let until = Instant::now() + Duration::from_secs(1);
        let mut buf = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            let wait = until.saturating_duration_since(Instant::now());
            if wait.is_zero() || self.connection.set_read_timeout(Some(wait)).is_err() {
                return;
            }
            match (&self.connection).read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }

    /// Whether a read would return at once (bytes there, or the end).
    fn readable_now(&self) -> bool {
        !self.poll_now(PollFlags::IN).is_empty()
    }

    pub(crate) fn head_timed_out(&self) {
        self.registry.head_timed_out();
    }

    /// Sets the socket's timeouts to the configured one.
    pub(crate) fn set_timeouts(&self) -> IoResult<()> {
        let timeout = self.registry.limits.socket_timeout;
        self.connection.set_read_timeout(timeout)?;
        self.connection.set_write_timeout(timeout)
    }

    /// Waits for the first byte without taking it, within the head deadline.
    pub(crate) fn peek_first_byte(&self) -> IoResult<Option<u8>> {
        self.arm_head_deadline()?;
        let mut byte = [0u8];
        match self.connection.peek(&mut byte)? {
            0 => Ok(None),
            _ => Ok(Some(byte[0])),
        }
    }

    /// While a head is awaited, the next read may wait only until the
    /// deadline: a client that sends a byte every few seconds is not
    /// stopped by a per-read timeout.
    fn arm_head_deadline(&self) -> IoResult<()> {
        let deadline = *self.head_deadline.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IoError::new(
                    ErrorKind::TimedOut,
                    "the request head did not arrive in time",
                ));
            }
            let wait = match self.registry.limits.socket_timeout {
                Some(timeout) => left.min(timeout),
                None => left,
            };
            self.connection.set_read_timeout(Some(wait))?;
        }
        Ok(())
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

impl Socket {
    /// A body's read may wait only until the body's deadline: its grace
    /// and a second for every `body_min_rate` bytes come, within
    /// `body_deadline` in all.
    fn arm_body_deadline(&self) -> IoResult<()> {
        let left = self.left(&self.body, self.registry.limits.body_deadline);
        if left.is_zero() {
            return Err(IoError::new(
                ErrorKind::TimedOut,
                "the request body did not arrive in time",
            ));
        }
        self.connection.set_read_timeout(Some(self.wait(left)))
    }

    /// An answer's write likewise: a client that reads a byte now and then
    /// would otherwise hold the worker that writes to it.
    fn arm_answer_deadline(&self) -> IoResult<()> {
        let left = self.left(&self.answer, self.registry.limits.body_deadline);
        if left.is_zero() {
            return Err(IoError::new(
                ErrorKind::TimedOut,
                "the client did not read the answer in time",
            ));
        }
        self.connection.set_write_timeout(Some(self.wait(left)))
    }

    /// What `clock`'s transfer has left: the grace and a second for every
    /// `body_min_rate` bytes moved, within `most`, from its first byte.
    fn left(&self, clock: &Mutex<BodyClock>, most: Duration) -> Duration {
        let limits = &self.registry.limits;
        let mut clock = clock.lock().unwrap_or_else(|p| p.into_inner());
        let started = *clock.started.get_or_insert_with(Instant::now);
        let earned = Duration::from_secs_f64(clock.bytes as f64 / limits.body_min_rate as f64);
        let allowed = (limits.body_grace + earned).min(most);
        allowed.saturating_sub(started.elapsed())
    }

    /// How long one read or write may block, with `left` of its deadline.
    fn wait(&self, left: Duration) -> Duration {
        match self.registry.limits.socket_timeout {
            Some(timeout) => left.min(timeout),
            None => left,
        }
    }
}

impl Read for &Socket {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let head = self
            .head_deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if head {
            self.arm_head_deadline()?;
            self.head_from_socket.store(true, Ordering::Relaxed);
        } else {
            self.arm_body_deadline()?;
        }
        self.reading.store(true, Ordering::Relaxed);
        let read = (&self.connection).read(buf);
        self.reading.store(false, Ordering::Relaxed);
        if let (false, Ok(n)) = (head, &read) {
            self.body.lock().unwrap_or_else(|p| p.into_inner()).bytes += *n as u64;
        }
        read
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        if !self.answering.swap(true, Ordering::Relaxed) && self.readable_now() {
            self.bytes_behind_answer.store(true, Ordering::Relaxed);
        }
        let written = match self.answering_request.load(Ordering::Relaxed) {
            true => self.arm_answer_deadline(),
            false => Ok(()),
        }
        .and_then(|()| (&self.connection).write(buf));
        match &written {
            Ok(n) => self.answer.lock().unwrap_or_else(|p| p.into_inner()).bytes += *n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => self.broken.store(true, Ordering::Relaxed),
        }
        written
    }

    fn flush(&mut self) -> IoResult<()> {
        (&self.connection).flush()
    }
}

/// A shared socket as an owned reader and writer (for the TLS stream).
pub(crate) struct SharedSocket(pub(crate) Arc<Socket>);

impl Read for SharedSocket {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        (&*self.0).read(buf)
    }
}

impl Write for SharedSocket {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        (&*self.0).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// `n` accepted connections (and their client ends), one listener.
    fn pairs(n: usize) -> Vec<(TcpStream, Connection, SocketAddr)> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        (0..n)
            .map(|_| {
                let client = TcpStream::connect(addr).unwrap();
                let (server, peer) = listener.accept().unwrap();
                (client, Connection::from(server), peer)
            })
            .collect()
    }

    fn limits(total: usize, per_address: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: total,
            max_per_address: per_address,
            ..ConnectionLimits::default()
        }
    }

    /// Blocks a thread in a read of `socket`, as a connection waiting for
    /// its next request head does; the thread returns what the read got.
    fn read_in_thread(socket: Arc<Socket>) -> std::thread::JoinHandle<IoResult<usize>> {
        let thread = std::thread::spawn(move || (&*socket).read(&mut [0u8; 8]));
        std::thread::sleep(Duration::from_millis(100));
        thread
    }

    #[test]
    fn past_a_cap_the_longest_idle_connection_makes_room() {
        let registry = Registry::new(limits(10, 2));
        let mut conns = pairs(3).into_iter();
        let (_c1, first, peer) = conns.next().unwrap();
        let first = registry.admit(first, Some(peer)).unwrap();
        let idle = read_in_thread(first.clone());
        let (_c2, second, peer2) = conns.next().unwrap();
        let second = registry.admit(second, Some(peer2)).unwrap();
        let (_c3, third, peer3) = conns.next().unwrap();
        let third = registry.admit(third, Some(peer3)).expect("room made");
        assert_eq!(registry.stats().evicted, 1);
        // The first, idle in its read, was shut: its read ends.
        assert_eq!(idle.join().unwrap().unwrap(), 0);
        drop(first);
        assert_eq!(registry.stats().open, 2);
        drop((second, third));
        assert_eq!(registry.stats().open, 0);
    }

    #[test]
    fn a_connection_whose_request_is_not_yet_read_is_not_idle() {
        let registry = Registry::new(limits(10, 1));
        let mut conns = pairs(2).into_iter();
        let (mut c1, first, peer) = conns.next().unwrap();
        c1.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        // Admitted, waiting for a head, but its thread has not read yet.
        let _first = registry.admit(first, Some(peer)).unwrap();
        let (_c2, second, peer2) = conns.next().unwrap();
        assert!(registry.admit(second, Some(peer2)).is_none());
        let stats = registry.stats();
        assert_eq!((stats.evicted, stats.refused), (0, 1));
    }

    #[test]
    fn a_connection_whose_client_hung_up_makes_room() {
        let registry = Registry::new(limits(10, 1));
        let mut conns = pairs(2).into_iter();
        let (mut c1, first, peer) = conns.next().unwrap();
        c1.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let first = registry.admit(first, Some(peer)).unwrap();
        first.busy();
        drop(c1);
        std::thread::sleep(Duration::from_millis(50));
        assert!(first.client_gone());
        let (_c2, second, peer2) = conns.next().unwrap();
        assert!(registry.admit(second, Some(peer2)).is_some());
        assert_eq!(registry.stats().evicted, 1);
    }

    #[test]
    fn with_every_connection_busy_a_new_one_is_refused() {
        let registry = Registry::new(limits(2, 2));
        let mut kept = vec![];
        // Their clients stay: one that hung up would make room.
        for (client, connection, peer) in pairs(3) {
            if let Some(socket) = registry.admit(connection, Some(peer)) {
                socket.busy();
                kept.push((client, socket));
            }
        }
        let stats = registry.stats();
        assert_eq!((stats.open, stats.refused, stats.evicted), (2, 1, 0));
    }

    #[test]
    fn other_addresses_are_not_counted_against_one_address() {
        let registry = Registry::new(limits(10, 1));
        let mut held = vec![];
        for (i, (client, connection, peer)) in pairs(3).into_iter().enumerate() {
            let peer = SocketAddr::new(IpAddr::from([10, 0, 0, i as u8]), peer.port());
            let socket = registry.admit(connection, Some(peer)).unwrap();
            socket.busy();
            held.push((client, socket));
        }
        assert_eq!(registry.stats().open, 3);
    }

    #[test]
    fn an_ipv6_client_counts_by_its_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(address_key(mapped), IpAddr::from([192, 0, 2, 7]));
    }

    #[test]
    fn a_head_trickled_a_byte_at_a_time_still_meets_its_deadline() {
        let registry = Registry::new(ConnectionLimits {
            head_deadline: Duration::from_millis(300),
            ..limits(10, 10)
        });
        let (mut client, connection, peer) = pairs(1).pop().unwrap();
        let socket = registry.admit(connection, Some(peer)).unwrap();
        let writer = std::thread::spawn(move || {
            // Five seconds of bytes, far past the deadline.
            for _ in 0..100 {
                if client.write_all(b"G").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let started = Instant::now();
        let mut buf = [0u8; 1];
        let error = loop {
            match (&*socket).read(&mut buf) {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        // The deadline itself, or the read it cut short (EAGAIN).
        assert!(
            matches!(error.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
            "{:?}",
            error
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        socket.shutdown(Shutdown::Both).unwrap();
        drop(socket);
        writer.join().unwrap();
    }
}
