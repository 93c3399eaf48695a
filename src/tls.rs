//! The appliance's HTTPS certificate: the operator's own, or one made on
//! first start and kept in the data directory. Booths cannot check a
//! self-made certificate against an authority, so they pin it: its SHA-256
//! fingerprint is in the journal, `cutout tls fingerprint` and the
//! dashboard's Status page.

use crate::config::TlsSettings;
use crate::discovery::hostname;
use anyhow::{bail, Context, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A certificate chain and its key, as PEM, with the leaf's fingerprint.
pub struct Certificate {
    pub chain_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// SHA-256 of the leaf certificate (DER), as `AB:CD:…`.
    pub fingerprint: String,
}

/// Where the certificate made on first start lives.
pub fn made_paths(data_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = data_dir.join("tls");
    (dir.join("certificate.pem"), dir.join("private-key.pem"))
}

/// The configured certificate, or the one made on an earlier start, or a
/// new one (saved for the next start).
pub fn load_or_make(tls: &TlsSettings, data_dir: &Path) -> Result<Certificate> {
    if let Some((cert, key)) = &tls.certificate {
        return read(cert, key);
    }
    let (cert, key) = made_paths(data_dir);
    if cert.exists() || key.exists() {
        return read(&cert, &key);
    }
    let made = make()?;
    save(&cert, &key, &made)?;
    log::info!(
        "made a self-signed certificate for HTTPS in {}",
        cert.display()
    );
    Ok(made)
}

/// The certificate `serve` would use, without making one: for the CLI.
pub fn existing(tls: Option<&TlsSettings>, data_dir: &Path) -> Result<Certificate> {
    let (cert, key) = match tls.and_then(|t| t.certificate.clone()) {
        Some(paths) => paths,
        None => made_paths(data_dir),
    };
    if !cert.exists() {
        bail!(
            "no certificate at {}: one is made when the service first starts with [tls] listen set",
            cert.display()
        );
    }
    read(&cert, &key)
}

fn read(cert: &Path, key: &Path) -> Result<Certificate> {
    let chain_pem = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
    let fingerprint =
        fingerprint(&chain_pem).with_context(|| format!("reading {}", cert.display()))?;
    Ok(Certificate {
        chain_pem,
        key_pem,
        fingerprint,
    })
}

/// The fingerprint of the first certificate in a PEM chain (the leaf).
pub fn fingerprint(chain_pem: &[u8]) -> Result<String> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem)
        .next()
        .context("no certificate in the PEM")?
        .context("a malformed certificate")?;
    Ok(fingerprint_of_der(&leaf))
}

pub fn fingerprint_of_der(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let hex: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
    hex.join(":")
}

/// A self-signed certificate for the names a booth may use: the host name,
/// its `.local` name, and localhost.
fn make() -> Result<Certificate> {
    let host = hostname();
    let names = vec![host.clone(), format!("{host}.local"), "localhost".into()];
    let mut params = rcgen::CertificateParams::new(names).context("certificate names")?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("cutout on {host}"));
    params.subject_alt_names.extend([
        rcgen::SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        rcgen::SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()),
    ]);
    // A pinned certificate is replaced by hand, not by expiry.
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    let key = rcgen::KeyPair::generate().context("making a key")?;
    let cert = params
        .self_signed(&key)
        .context("signing the certificate")?;
    Ok(Certificate {
        fingerprint: fingerprint_of_der(cert.der()),
        chain_pem: cert.pem().into_bytes(),
        key_pem: key.serialize_pem().into_bytes(),
    })
}

/// Writes the key, then the certificate, both readable by the service's
/// user alone: a start cut short leaves no certificate without its key.
pub fn save(cert: &Path, key: &Path, made: &Certificate) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = cert.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |path: &Path, bytes: &[u8]| -> Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("writing {}", path.display()))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", path.display()))
    };
    write(key, &made.key_pem)?;
    write(cert, &made.chain_pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TlsSettings {
        TlsSettings {
            listen: "127.0.0.1:0".into(),
            certificate: None,
            plain_http: true,
        }
    }

    #[test]
    fn a_certificate_is_made_once_and_kept_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let made = load_or_make(&settings(), data.path()).unwrap();
        assert_eq!(made.fingerprint.len(), 32 * 3 - 1);
        let again = load_or_make(&settings(), data.path()).unwrap();
        assert_eq!(again.fingerprint, made.fingerprint, "kept, not made anew");
        let (_, key) = made_paths(data.path());
        let mode = std::fs::metadata(key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            existing(Some(&settings()), data.path())
                .unwrap()
                .fingerprint,
            made.fingerprint
        );
    }

    #[test]
    fn the_operators_own_certificate_is_used_and_a_broken_one_is_named() {
        let data = tempfile::tempdir().unwrap();
        let own = make().unwrap();
        let (cert, key) = (data.path().join("c.pem"), data.path().join("k.pem"));
        save(&cert, &key, &own).unwrap();
        let tls = TlsSettings {
            certificate: Some((cert.clone(), key)),
            ..settings()
        };
        assert_eq!(
            load_or_make(&tls, data.path()).unwrap().fingerprint,
            own.fingerprint
        );
        assert!(!made_paths(data.path()).0.exists());
        std::fs::write(&cert, "not a certificate").unwrap();
        let error = format!("{:#}", load_or_make(&tls, data.path()).err().unwrap());
        assert!(error.contains("c.pem"), "{error}");
    }

    #[test]
    fn without_a_certificate_the_cli_says_where_one_will_be() {
        let data = tempfile::tempdir().unwrap();
        let error = existing(None, data.path()).err().unwrap().to_string();
        assert!(error.contains("certificate.pem"), "{error}");
    }
}
