//! HTTPS as a booth speaks it: the appliance's certificate pinned by its
//! SHA-256 fingerprint.

use super::{read_reply, Reply};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Accepts the one certificate whose SHA-256 fingerprint it was given, as
/// a booth that pinned it does; the handshake's signatures are checked as
/// usual.
#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let hex: Vec<String> = Sha256::digest(end_entity)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        if hex.join(":") == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the pinned certificate".into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Sends `raw` over TLS to a server whose certificate has `fingerprint`.
pub fn send_pinned(addr: SocketAddr, fingerprint: &str, raw: &[u8]) -> std::io::Result<Reply> {
    send_pinned_from(None, addr, fingerprint, raw)
}

/// `send_pinned` from the local address `from`, one of 127.0.0.0/8.
pub fn send_pinned_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    fingerprint: &str,
    raw: &[u8],
) -> std::io::Result<Reply> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            fingerprint: fingerprint.to_owned(),
            provider,
        }))
        .with_no_client_auth();
    let name = ServerName::try_from("photobooth.local").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = match from {
        None => TcpStream::connect(addr)?,
        Some(from) => {
            super::try_connect_from(from, addr).ok_or(std::io::ErrorKind::ConnectionRefused)?
        }
    };
    socket.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut tls = rustls::StreamOwned::new(connection, socket);
    // The handshake, and so the pin's check, happens on this first write.
    tls.write_all(raw)?;
    Ok(read_reply(&mut tls))
}
