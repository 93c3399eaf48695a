//! cutout patches 7, 8 and 9 against real sockets: idle connections past
//! the caps never stop the server, the TLS port explains itself to a
//! plain-HTTP client, a body must keep coming, and a client that hung up
//! is not served what it pipelined.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use tiny_http::{ConnectionLimits, Listener, Response, Server, SslConfig};

fn serve(listeners: Vec<(Listener, Option<SslConfig>)>, limits: ConnectionLimits) -> Arc<Server> {
    let server = Arc::new(Server::from_listeners(listeners, limits).unwrap());
    let worker = server.clone();
    thread::spawn(move || {
        while let Ok(request) = worker.recv() {
            let _ = request.respond(Response::from_string("hello"));
        }
    });
    server
}

fn listener() -> (Listener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener.into(), addr)
}

fn get(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn idle_connections_past_the_caps_never_stop_the_server() {
    let (listener, addr) = listener();
    let limits = ConnectionLimits {
        max_connections: 16,
        max_per_address: 8,
        head_deadline: Duration::from_secs(30),
        ..ConnectionLimits::default()
    };
    let server = serve(vec![(listener, None)], limits);
    let mut idle = vec![];
    for round in 0..10 {
        for _ in 0..20 {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            idle.push(stream);
        }
        // Their threads take the half lines and wait, idle, for the rest.
        thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let reply = get(addr);
        assert!(reply.starts_with("HTTP/1.1 200"), "round {}: {}", round, reply);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    let stats = server.connection_stats();
    assert!(stats.open <= 8, "{:?}", stats);
    // Past the cap each idle one made room; one that came before the
    // others were read was closed instead.
    assert!(stats.evicted >= 100, "{:?}", stats);
    assert!(stats.evicted + stats.refused >= 190, "{:?}", stats);
}

#[test]
fn a_head_that_does_not_arrive_in_time_gets_408() {
    let (listener, addr) = listener();
    let limits = ConnectionLimits {
        head_deadline: Duration::from_millis(500),
        ..ConnectionLimits::default()
    };
    let server = serve(vec![(listener, None)], limits);
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let mut reply = Vec::new();
    // A byte every 100 ms: each read is quick, the head never ends.
    stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    while started.elapsed() < Duration::from_secs(3) {
        if stream.write_all(b"X").is_err() {
            break;
        }
        match stream.read(&mut [0u8; 512]) {
            Ok(0) => break,
            Ok(n) => reply.push(n),
            Err(_) => {}
        }
    }
    assert!(!reply.is_empty(), "an answer came");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(server.connection_stats().head_timeouts, 1);
}

#[test]
fn a_body_that_trickles_in_times_out_at_its_deadline() {
    let (listener, addr) = listener();
    let limits = ConnectionLimits {
        body_grace: Duration::from_millis(500),
        body_min_rate: 1024,
        ..ConnectionLimits::default()
    };
    let server = Arc::new(Server::from_listeners(vec![(listener, None)], limits).unwrap());
    let reader = thread::spawn(move || {
        let mut request = server.recv().unwrap();
        let started = Instant::now();
        let read = request.as_reader().read_to_end(&mut Vec::new());
        (read.map_err(|e| e.kind()), started.elapsed())
    });
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
        .unwrap();
    // 100 bytes a second, a tenth of the minimum rate.
    while !reader.is_finished() {
        if stream.write_all(b"0123456789").is_err() {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let (read, took) = reader.join().unwrap();
    let kind = read.unwrap_err();
    assert!(
        matches!(kind, std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock),
        "{:?}",
        kind
    );
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(2), "{:?}", took);
}

#[test]
fn a_client_that_reads_its_answer_too_slowly_is_dropped() {
    let (listener, addr) = listener();
    let limits = ConnectionLimits {
        body_grace: Duration::from_millis(300),
        body_deadline: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let server = Arc::new(Server::from_listeners(vec![(listener, None)], limits).unwrap());
    let writer = thread::spawn(move || {
        let request = server.recv().unwrap();
        let started = Instant::now();
        // More than the sockets' buffers hold, so that writes must wait.
        let written = request.respond(Response::from_data(vec![b'x'; 64 << 20]));
        (written.map_err(|e| e.kind()), started.elapsed())
    });
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // A byte every 100 ms, while the server writes.
    while !writer.is_finished() {
        if !matches!(stream.read(&mut [0u8; 1]), Ok(1)) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let (written, took) = writer.join().unwrap();
    assert!(written.is_err(), "the answer could not have been written whole");
    assert!(took < Duration::from_secs(3), "{:?}", took);
}

#[test]
fn requests_a_client_pipelined_before_hanging_up_are_not_served() {
    let (listener, addr) = listener();
    let server = Arc::new(Server::from_listeners(vec![(listener, None)], ConnectionLimits::default()).unwrap());
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (server, served) = (server.clone(), served.clone());
        thread::spawn(move || {
            while let Ok(request) = server.recv() {
                thread::sleep(Duration::from_millis(50));
                served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = request.respond(Response::from_string("hello"));
            }
        });
    }
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all("GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(50).as_bytes())
        .unwrap();
    drop(stream);
    thread::sleep(Duration::from_millis(1500));
    // The first was read before the client left; nothing after it.
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[cfg(feature = "ssl-rustls")]
fn certificate() -> (SslConfig, Vec<u8>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = cert.cert.der().to_vec();
    let config = SslConfig {
        certificate: cert.cert.pem().into_bytes(),
        private_key: cert.signing_key.serialize_pem().into_bytes(),
    };
    (config, der)
}

#[test]
#[cfg(feature = "ssl-rustls")]
fn plain_http_to_the_tls_port_is_told_to_use_https() {
    let (tls_listener, addr) = listener();
    let (config, _) = certificate();
    let _server = serve(vec![(tls_listener, Some(config))], ConnectionLimits::default());
    let reply = get(addr);
    assert!(reply.starts_with("HTTP/1.1 400"), "{}", reply);
    assert!(reply.contains("https_required"), "{}", reply);
}

#[test]
#[cfg(feature = "ssl-rustls")]
fn a_tls_client_that_trusts_the_certificate_is_served_beside_plain_http() {
    let (plain, plain_addr) = listener();
    let (tls, tls_addr) = listener();
    let (config, der) = certificate();
    let _server = serve(vec![(plain, None), (tls, Some(config))], ConnectionLimits::default());
    assert!(get(plain_addr).starts_with("HTTP/1.1 200"));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.into()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = std::convert::TryFrom::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, TcpStream::connect(tls_addr).unwrap());
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    tls.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{}", reply);
    assert!(reply.ends_with("hello"), "{}", reply);
}
