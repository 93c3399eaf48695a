//! A backup sealed under a passphrase, with RustCrypto's parts only:
//! argon2id derives the key from the passphrase and a random salt, and
//! XChaCha20-Poly1305 seals 64 KiB chunks in the STREAM construction (the
//! `aead` crate's `stream`: each chunk's nonce counts, the last is marked,
//! so a chunk dropped, moved or cut off fails like an altered one). The
//! header is every chunk's associated data: a changed byte there fails too.
//!
//! ```text
//! "cutout-backup\n"  version (1)  argon2 m KiB, t, p (u32 LE each)
//! salt (16)  nonce (19)  chunk...  (each 64 KiB + 16, the last shorter)
//! ```

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::stream::{DecryptorBE32, EncryptorBE32};
use chacha20poly1305::aead::{KeyInit, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use std::io::{self, BufRead, Read, Write};

const MAGIC: &[u8] = b"cutout-backup\n";
const VERSION: u8 = 1;
const SALT: usize = 16;
const NONCE: usize = 19;
const HEADER: usize = MAGIC.len() + 1 + 12 + SALT + NONCE;
const CHUNK: usize = 64 * 1024;
const TAG: usize = 16;
/// 64 MiB and 3 passes: about a second on a Pi 3, and room beside the
/// service on a 512 MiB board.
const MEMORY_KIB: u32 = 64 * 1024;
const PASSES: u32 = 3;
/// The most a file may ask of a restore (from the setup page too).
const MAX_MEMORY_KIB: u32 = 256 * 1024;
const MAX_PASSES: u32 = 10;

#[derive(Debug)]
pub enum OpenError {
    NotSealed,
    TooCostly(String),
    WrongPassphrase,
    Damaged,
}

fn key(passphrase: &str, salt: &[u8], memory_kib: u32, passes: u32) -> io::Result<[u8; 32]> {
    let params = Params::new(memory_kib, passes, 1, Some(32))
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut key = [0u8; 32];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), salt, &mut key)
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(key)
}

/// Seals what is written to it into `output`; `finish` writes the last chunk.
pub struct Sealing<W: Write> {
    output: W,
    header: Vec<u8>,
    stream: EncryptorBE32<XChaCha20Poly1305>,
    /// Plaintext not yet sealed: a chunk is sealed once more follows it, so
    /// that the last one is known.
    pending: Vec<u8>,
}

impl<W: Write> Sealing<W> {
    pub fn new(mut output: W, passphrase: &str) -> io::Result<Sealing<W>> {
        let mut salt = [0u8; SALT];
        let mut nonce = [0u8; NONCE];
        getrandom::fill(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
        getrandom::fill(&mut nonce).map_err(|e| io::Error::other(e.to_string()))?;
        let mut header = MAGIC.to_vec();
        header.push(VERSION);
        for n in [MEMORY_KIB, PASSES, 1] {
            header.extend_from_slice(&n.to_le_bytes());
        }
        header.extend_from_slice(&salt);
        header.extend_from_slice(&nonce);
        output.write_all(&header)?;
        let cipher = XChaCha20Poly1305::new(&key(passphrase, &salt, MEMORY_KIB, PASSES)?.into());
        Ok(Sealing {
            output,
            header,
            stream: EncryptorBE32::from_aead(cipher, nonce.as_ref().into()),
            pending: Vec::with_capacity(2 * CHUNK),
        })
    }

    pub fn finish(mut self) -> io::Result<W> {
        let payload = Payload {
            msg: &self.pending,
            aad: &self.header,
        };
        let sealed = self
            .stream
            .encrypt_last(payload)
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.output.write_all(&sealed)?;
        self.output.flush()?;
        Ok(self.output)
    }
}

impl<W: Write> Write for Sealing<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        while self.pending.len() > CHUNK {
            let payload = Payload {
                msg: &self.pending[..CHUNK],
                aad: &self.header,
            };
            let sealed = self
                .stream
                .encrypt_next(payload)
                .map_err(|e| io::Error::other(e.to_string()))?;
            self.output.write_all(&sealed)?;
            self.pending.drain(..CHUNK);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.output.flush()
    }
}

/// What `Sealing` wrote, opened chunk by chunk as it is read. A read
/// fails (`InvalidData`) at a chunk that does not open, and at an end
/// without the last chunk.
pub struct Opening<R: BufRead> {
    input: R,
    header: Vec<u8>,
    stream: Option<DecryptorBE32<XChaCha20Poly1305>>,
    plain: Vec<u8>,
    read: usize,
}

impl<R: BufRead> Opening<R> {
    /// Reads the header, derives the key and opens the first chunk, so
    /// that a wrong passphrase is told apart from later damage.
    pub fn new(mut input: R, passphrase: &str) -> Result<Opening<R>, OpenError> {
        let mut header = vec![0u8; HEADER];
        input
            .read_exact(&mut header)
            .map_err(|_| OpenError::NotSealed)?;
        if !header.starts_with(MAGIC) || header[MAGIC.len()] != VERSION {
            return Err(OpenError::NotSealed);
        }
        let number = |i: usize| {
            let at = MAGIC.len() + 1 + 4 * i;
            u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"))
        };
        let (memory_kib, passes, lanes) = (number(0), number(1), number(2));
        if memory_kib > MAX_MEMORY_KIB || passes > MAX_PASSES || lanes != 1 {
            return Err(OpenError::TooCostly(format!(
                "its key takes {memory_kib} KiB, {passes} passes and {lanes} lanes; a backup's takes at most {MAX_MEMORY_KIB} KiB, {MAX_PASSES} passes and 1 lane"
            )));
        }
        let salt = &header[HEADER - NONCE - SALT..HEADER - NONCE];
        let nonce = &header[HEADER - NONCE..];
        let key = key(passphrase, salt, memory_kib, passes).map_err(|_| OpenError::Damaged)?;
        let cipher = XChaCha20Poly1305::new(&key.into());
        let stream = Some(DecryptorBE32::from_aead(cipher, nonce.into()));
        let mut opening = Opening {
            input,
            header,
            stream,
            plain: vec![],
            read: 0,
        };
        match opening.next_chunk() {
            Ok(()) => Ok(opening),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(OpenError::WrongPassphrase),
            Err(_) => Err(OpenError::Damaged),
        }
    }

    fn next_chunk(&mut self) -> io::Result<()> {
        let damaged = || io::Error::new(io::ErrorKind::InvalidData, "the backup is damaged");
        let Some(stream) = self.stream.as_mut() else {
            self.plain.clear();
            return Ok(());
        };
        let mut sealed = Vec::with_capacity(CHUNK + TAG);
        (&mut self.input)
            .take((CHUNK + TAG) as u64)
            .read_to_end(&mut sealed)?;
        let last = sealed.len() < CHUNK + TAG || self.input.fill_buf()?.is_empty();
        let payload = Payload {
            msg: &sealed,
            aad: &self.header,
        };
        self.plain = if last {
            let stream = self.stream.take().expect("present");
            stream.decrypt_last(payload).map_err(|_| damaged())?
        } else {
            stream.decrypt_next(payload).map_err(|_| damaged())?
        };
        self.read = 0;
        Ok(())
    }
}

impl<R: BufRead> Read for Opening<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.read == self.plain.len() {
            if self.stream.is_none() {
                return Ok(0);
            }
            self.next_chunk()?;
        }
        let n = buf.len().min(self.plain.len() - self.read);
        buf[..n].copy_from_slice(&self.plain[self.read..self.read + n]);
        self.read += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(plain: &[u8]) -> Vec<u8> {
        let mut sealing = Sealing::new(vec![], "a long passphrase").unwrap();
        for piece in plain.chunks(1000) {
            sealing.write_all(piece).unwrap();
        }
        sealing.finish().unwrap()
    }

    fn open(sealed: &[u8], passphrase: &str) -> Result<Vec<u8>, String> {
        let mut opening = Opening::new(sealed, passphrase).map_err(|e| format!("{e:?}"))?;
        let mut plain = vec![];
        opening
            .read_to_end(&mut plain)
            .map_err(|e| format!("{:?}", e.kind()))?;
        Ok(plain)
    }

    #[test]
    fn what_is_sealed_opens_whole_at_every_length_around_a_chunk() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 7] {
            let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let sealed = seal(&plain);
            let chunks = len.div_ceil(CHUNK).max(1);
            assert_eq!(sealed.len(), HEADER + len + TAG * chunks, "{len}");
            assert_eq!(open(&sealed, "a long passphrase").unwrap(), plain, "{len}");
        }
    }

    #[test]
    fn a_wrong_passphrase_a_cut_a_flipped_bit_or_a_dropped_chunk_do_not_open() {
        let plain: Vec<u8> = (0..3 * CHUNK + 5).map(|i| (i % 7) as u8).collect();
        let sealed = seal(&plain);
        assert_eq!(
            open(&sealed, "another passphrase"),
            Err("WrongPassphrase".into())
        );
        assert_eq!(
            open(&sealed[..20], "a long passphrase"),
            Err("NotSealed".into())
        );
        let whole_chunks = HEADER + 2 * (CHUNK + TAG);
        let mut dropped = sealed[..HEADER + CHUNK + TAG].to_vec();
        dropped.extend_from_slice(&sealed[whole_chunks..]);
        for (what, bytes) in [
            ("cut at a chunk's end", sealed[..whole_chunks].to_vec()),
            ("cut inside a chunk", sealed[..sealed.len() - 3].to_vec()),
            ("a chunk dropped", dropped),
        ] {
            assert_eq!(
                open(&bytes, "a long passphrase"),
                Err("InvalidData".into()),
                "{what}"
            );
        }
        for at in [
            HEADER - 1,
            HEADER + 5,
            HEADER + CHUNK + TAG + 9,
            sealed.len() - 1,
        ] {
            let mut flipped = sealed.clone();
            flipped[at] ^= 0x10;
            assert!(
                open(&flipped, "a long passphrase").is_err(),
                "flipped at {at}"
            );
        }
        let mut costly = sealed.clone();
        costly[MAGIC.len() + 1..MAGIC.len() + 5].copy_from_slice(&(1u32 << 30).to_le_bytes());
        assert!(open(&costly, "a long passphrase")
            .unwrap_err()
            .starts_with("TooCostly"));
    }
}
