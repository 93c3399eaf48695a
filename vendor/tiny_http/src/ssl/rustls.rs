use crate::util::refined_tcp_stream::Stream as RefinedStream;
use crate::util::socket::{SharedSocket, Socket};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::error::Error;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::{Arc, Mutex, MutexGuard};
use zeroize::Zeroizing;

type Tls = rustls::StreamOwned<rustls::ServerConnection, SharedSocket>;

/// A rustls connection over a shared socket. The `Mutex` lets the reading
/// and writing halves take turns; the server reads a connection's next
/// request only after the previous one is answered, so they never wait on
/// each other.
#[derive(Clone)]
pub(crate) struct RustlsStream(Arc<Mutex<Tls>>);

impl RustlsStream {
    fn lock(&self) -> MutexGuard<'_, Tls> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closing the write half says so in TLS first (close_notify), so that
    /// a client reading to the end sees a clean end, not a truncation.
    pub(crate) fn shutdown(&mut self, how: Shutdown) -> std::io::Result<()> {
        let mut tls = self.lock();
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            tls.conn.send_close_notify();
            let tls = &mut *tls;
            while tls.conn.wants_write() {
                if tls.conn.write_tls(&mut tls.sock).is_err() {
                    break;
                }
            }
        }
        tls.sock.0.shutdown(how)
    }
}

impl Read for RustlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.lock().read(buf)
    }
}

impl Write for RustlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lock().flush()
    }
}

pub(crate) struct RustlsContext(Arc<rustls::ServerConfig>);

impl RustlsContext {
    pub(crate) fn from_pem(
        certificates: Vec<u8>,
        private_key: Zeroizing<Vec<u8>>,
    ) -> Result<Self, Box<dyn Error + Send + Sync>> {
        let chain = CertificateDer::pem_slice_iter(&certificates)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the certificate file: {e}"))?;
        if chain.is_empty() {
            return Err("the certificate file holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(&private_key)
            .map_err(|e| format!("the private key file: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        Ok(Self(Arc::new(config)))
    }

    pub(crate) fn accept(
        &self,
        socket: Arc<Socket>,
    ) -> Result<RustlsStream, Box<dyn Error + Send + Sync + 'static>> {
        let connection = rustls::ServerConnection::new(self.0.clone())?;
        Ok(RustlsStream(Arc::new(Mutex::new(rustls::StreamOwned::new(
            connection,
            SharedSocket(socket),
        )))))
    }
}

impl From<RustlsStream> for RefinedStream {
    fn from(stream: RustlsStream) -> Self {
        Self::Https(stream)
    }
}
