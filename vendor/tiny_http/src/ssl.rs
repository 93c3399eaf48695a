//! TLS through rustls (cutout patch 8: rustls 0.23 with the ring provider;
//! upstream's OpenSSL choice is gone, and its rustls 0.20 had advisories).

#[cfg(feature = "ssl-rustls")]
pub(crate) mod rustls;
#[cfg(feature = "ssl-rustls")]
pub(crate) use self::rustls::RustlsContext as SslContextImpl;
#[cfg(feature = "ssl-rustls")]
pub(crate) use self::rustls::RustlsStream as SslStream;
