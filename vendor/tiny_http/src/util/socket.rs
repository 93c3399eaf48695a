//! cutout patch 7: what one client may hold.
//!
//! Every accepted connection is one `Socket`, shared by its reading and
//! writing halves through an `Arc` (upstream duplicated the file descriptor
//! for the second half and panicked when that failed: about 510 idle
//! connections under a 1,024 open-file limit stopped the accept thread for
//! good). A `Registry` caps the connections open in all and per client
//! address. A new connection past a cap takes the place of the idle one that
//! has waited longest for a request head; where none is idle it is closed
//! at once. Idle: its previous response is sent and its thread is blocked
//! reading an empty socket, so it holds nothing a client is owed (a new
//! connection whose request is there but not yet read is not idle). A request head must arrive whole within a deadline,
//! however slowly its bytes trickle in.

use std::collections::HashMap;
use std::io::{Error as IoError, ErrorKind, Read, Result as IoResult, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
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
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            socket_timeout: Some(Duration::from_secs(30)),
            head_deadline: Duration::from_secs(10),
            max_connections: 512,
            max_per_address: 64,
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
        });
        let mut victims = Vec::new();
        let admitted = {
            let mut open = self.lock();
            let now = Instant::now();
            let room_from = |open: &mut HashMap<u64, Entry>,
                             victims: &mut Vec<Arc<Socket>>,
                             same: &dyn Fn(&Entry) -> bool,
                             cap: usize| {
                let live = open.values().filter(|e| !e.evicted && same(e)).count();
                if live < cap {
                    return true;
                }
                let oldest = open
                    .iter_mut()
                    .filter(|(_, e)| !e.evicted && same(e))
                    .filter(|(_, e)| e.reading.load(Ordering::Relaxed))
                    .filter_map(|(_, e)| Some((e.waiting_since?, e)))
                    .min_by_key(|(since, _)| *since);
                match oldest {
                    Some((_, entry)) => {
                        entry.evicted = true;
                        victims.extend(entry.socket.upgrade());
                        true
                    }
                    None => false,
                }
            };
            let admitted = room_from(
                &mut open,
                &mut victims,
                &|e| e.address == address,
                self.limits.max_per_address,
            ) && room_from(&mut open, &mut victims, &|_| true, self.limits.max_connections);
            if admitted {
                open.insert(
                    socket.id,
                    Entry {
                        address,
                        waiting_since: Some(now),
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
        *self.head_deadline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(now + self.registry.limits.head_deadline);
        if let Some(entry) = self.registry.lock().get_mut(&self.id) {
            entry.waiting_since = Some(now);
        }
    }

    /// A request head has arrived: the socket timeout alone applies again.
    pub(crate) fn busy(&self) {
        *self.head_deadline.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.connection
            .set_read_timeout(self.registry.limits.socket_timeout)
            .ok();
        if let Some(entry) = self.registry.lock().get_mut(&self.id) {
            entry.waiting_since = None;
        }
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

impl Read for &Socket {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        self.arm_head_deadline()?;
        self.reading.store(true, Ordering::Relaxed);
        let read = (&self.connection).read(buf);
        self.reading.store(false, Ordering::Relaxed);
        read
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        (&self.connection).write(buf)
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
    fn with_every_connection_busy_a_new_one_is_refused() {
        let registry = Registry::new(limits(2, 2));
        let mut kept = vec![];
        for (client, connection, peer) in pairs(3) {
            if let Some(socket) = registry.admit(connection, Some(peer)) {
                socket.busy();
                kept.push(socket);
            }
            drop(client);
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
