//! A TCP relay in front of PostgreSQL that breaks one statement's
//! connection on purpose: before the statement reaches the server, or after
//! the server ran and committed it, with its answer never delivered. The
//! statement is found by its text, in the Parse message a client sends to
//! prepare it; its Bind and Execute come in the next message batch, after
//! the server's ReadyForQuery to the Parse. Every other connection, and
//! this one until then, is relayed as it is.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Loss {
    /// The statement is never sent: nothing of it is written.
    Statement,
    /// The server runs it to its end; the client gets no answer.
    Answer,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Relaying,
    Prepared(Loss),
    Executing(Loss),
    Losing,
}

pub struct PgRelay {
    pub port: u16,
    armed: Arc<Mutex<Option<(String, Loss)>>>,
}

impl PgRelay {
    pub fn to(server: SocketAddr) -> PgRelay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(Mutex::new(None));
        let shared = armed.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(upstream)) = (client, TcpStream::connect(server)) else {
                    continue;
                };
                relay(client, upstream, shared.clone());
            }
        });
        PgRelay { port, armed }
    }

    /// The next statement whose text contains `text` meets `loss`.
    pub fn lose(&self, text: &str, loss: Loss) {
        *self.armed.lock().unwrap() = Some((text.to_owned(), loss));
    }

    /// Whether the armed statement has been seen (and so met its loss).
    pub fn lost(&self) -> bool {
        self.armed.lock().unwrap().is_none()
    }
}

fn relay(client: TcpStream, upstream: TcpStream, armed: Arc<Mutex<Option<(String, Loss)>>>) {
    let phase = Arc::new(Mutex::new(Phase::Relaying));
    let close = {
        let (client, upstream) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
        Arc::new(move || {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        })
    };
    // Client to server, in the client's writes: one holds a batch of messages.
    {
        let (mut from, mut to) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
        let (phase, close) = (phase.clone(), close.clone());
        thread::spawn(move || {
            let mut buf = vec![0; 1 << 16];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let batch = &buf[..n];
                let mut phase = phase.lock().unwrap();
                match *phase {
                    Phase::Relaying => {
                        let mut armed = armed.lock().unwrap();
                        if let Some((text, loss)) = armed.clone() {
                            if contains(batch, text.as_bytes()) {
                                *phase = Phase::Prepared(loss);
                                *armed = None;
                            }
                        }
                    }
                    Phase::Executing(Loss::Statement) => {
                        close();
                        return;
                    }
                    Phase::Executing(Loss::Answer) => *phase = Phase::Losing,
                    _ => {}
                }
                drop(phase);
                if to.write_all(batch).is_err() {
                    break;
                }
            }
            close();
        });
    }
    // Server to client, message by message (a type byte, then a length
    // that counts itself).
    let (mut from, mut to) = (upstream, client);
    thread::spawn(move || {
        let (mut pending, mut buf) = (Vec::new(), vec![0; 1 << 16]);
        while let Ok(n @ 1..) = from.read(&mut buf) {
            pending.extend_from_slice(&buf[..n]);
            while pending.len() >= 5 {
                let len = u32::from_be_bytes(pending[1..5].try_into().unwrap()) as usize + 1;
                if pending.len() < len {
                    break;
                }
                let message: Vec<u8> = pending.drain(..len).collect();
                let ready = message[0] == b'Z';
                let mut phase = phase.lock().unwrap();
                match *phase {
                    Phase::Losing if ready => {
                        close();
                        return;
                    }
                    Phase::Losing => continue,
                    Phase::Prepared(loss) if ready => *phase = Phase::Executing(loss),
                    _ => {}
                }
                drop(phase);
                if to.write_all(&message).is_err() {
                    close();
                    return;
                }
            }
        }
        close();
    });
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
