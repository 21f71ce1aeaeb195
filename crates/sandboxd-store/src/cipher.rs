//! Credentials at rest: XChaCha20-Poly1305 with a 32-byte key the store never writes into the
//! database. Each sealed value has its own random 24-byte nonce and is bound to a label (the
//! instance name), so a sealed blob copied onto another row does not open.
//!
//! Sealed form: `v1:` followed by the hex of nonce ‖ ciphertext ‖ tag.

use std::fmt;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};

use crate::error::{Result, StoreError};

const PREFIX: &str = "v1:";
const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// The key credentials are sealed with. `Debug` shows nothing of it; the key bytes are wiped
/// when the last copy is dropped.
#[derive(Clone)]
pub struct SecretCipher {
    aead: XChaCha20Poly1305,
}

impl fmt::Debug for SecretCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretCipher(..)")
    }
}

/// Why a sealed value did not open. Deliberately without detail: the caller names the row.
#[derive(Debug)]
pub(crate) struct OpenFailed;

impl SecretCipher {
    fn from_bytes(key: &[u8; KEY_LEN]) -> Self {
        Self {
            aead: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// A fresh key from the operating system's CSPRNG (through the thread-local generator).
    pub fn generate() -> Self {
        Self::from_bytes(&Self::fresh_key())
    }

    fn fresh_key() -> Zeroizing<[u8; KEY_LEN]> {
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        rand::rng().fill_bytes(key.as_mut());
        key
    }

    /// A key given as 64 hex characters (surrounding whitespace ignored), e.g. from the
    /// `SANDBOXD_…` environment.
    pub fn from_key_hex(key_hex: &SecretString) -> Result<Self> {
        Self::parse_hex(key_hex.expose_secret(), "given as hex")
    }

    fn parse_hex(text: &str, location: &str) -> Result<Self> {
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        hex::decode_to_slice(text.trim(), key.as_mut()).map_err(|_| StoreError::Key {
            location: location.to_owned(),
            detail: format!("expected {} hex characters (a 32-byte key)", KEY_LEN * 2),
        })?;
        Ok(Self::from_bytes(&key))
    }

    /// Reads the key file at `path`, or creates it (mode 0600, parent directories 0700 as
    /// needed) with a fresh key. A file readable by others is used, with a warning.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};

        let location = path.display().to_string();
        let key_err = |detail: String| StoreError::Key {
            location: location.clone(),
            detail,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| key_err(format!("cannot create its directory: {e}")))?;
        }
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(mut file) => {
                let key = Self::fresh_key();
                let mut text = Zeroizing::new(hex::encode(key.as_ref()));
                text.push('\n');
                file.write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| key_err(format!("cannot write a new key: {e}")))?;
                tracing::info!(path = %location, "created a new secret key for stored credentials");
                Ok(Self::from_bytes(&key))
            }
            // Another process (or an earlier run) made it: use that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta =
                    std::fs::metadata(path).map_err(|e| key_err(format!("cannot read it: {e}")))?;
                if meta.mode() & 0o077 != 0 {
                    tracing::warn!(
                        path = %location,
                        mode = format!("{:o}", meta.mode() & 0o777),
                        "the secret key file is readable by other users; chmod 600 it"
                    );
                }
                let text = Zeroizing::new(
                    std::fs::read_to_string(path)
                        .map_err(|e| key_err(format!("cannot read it: {e}")))?,
                );
                Self::parse_hex(&text, &location)
            }
            Err(e) => Err(key_err(format!("cannot create it: {e}"))),
        }
    }

    /// Seals `plaintext`, bound to `label`.
    pub(crate) fn seal(&self, label: &str, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let nonce = XNonce::from(nonce);
        let sealed = self
            .aead
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: label.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 encrypts any message shorter than 256 GiB");
        let mut out = String::with_capacity(PREFIX.len() + 2 * (NONCE_LEN + sealed.len()));
        out.push_str(PREFIX);
        out.push_str(&hex::encode(nonce));
        out.push_str(&hex::encode(sealed));
        out
    }

    /// Opens what [`seal`](Self::seal) produced for the same `label`.
    pub(crate) fn open(&self, label: &str, sealed: &str) -> Result<Zeroizing<Vec<u8>>, OpenFailed> {
        let body = sealed.strip_prefix(PREFIX).ok_or(OpenFailed)?;
        let bytes = hex::decode(body).map_err(|_| OpenFailed)?;
        if bytes.len() < NONCE_LEN {
            return Err(OpenFailed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce).map_err(|_| OpenFailed)?;
        self.aead
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad: label.as_bytes(),
                },
            )
            .map(Zeroizing::new)
            .map_err(|_| OpenFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_with_fresh_nonces() {
        let cipher = SecretCipher::generate();
        let a = cipher.seal("x", b"hello");
        let b = cipher.seal("x", b"hello");
        assert_ne!(a, b, "nonces are random");
        assert_eq!(cipher.open("x", &a).expect("opens").as_slice(), b"hello");
        assert!(!a.contains(&hex::encode(b"hello")));
    }

    #[test]
    fn wrong_key_label_or_tampering_fail() {
        let cipher = SecretCipher::generate();
        let sealed = cipher.seal("row-1", b"secret");
        assert!(SecretCipher::generate().open("row-1", &sealed).is_err());
        assert!(cipher.open("row-2", &sealed).is_err());
        let mut tampered = sealed.clone();
        let last = tampered.pop().expect("non-empty");
        tampered.push(if last == '0' { '1' } else { '0' });
        assert!(cipher.open("row-1", &tampered).is_err());
        assert!(cipher.open("row-1", "v1:zz").is_err());
        assert!(cipher.open("row-1", "").is_err());
    }

    #[test]
    fn hex_keys_parse_and_bad_ones_are_refused() {
        let hex_key = SecretString::from("ab".repeat(32));
        let a = SecretCipher::from_key_hex(&hex_key).expect("valid");
        let b = SecretCipher::from_key_hex(&SecretString::from(format!(" {} \n", "ab".repeat(32))))
            .expect("valid with whitespace");
        assert_eq!(
            b.open("l", &a.seal("l", b"same key"))
                .expect("same key")
                .as_slice(),
            b"same key"
        );
        for bad in ["", "ab", &"zz".repeat(32), &"ab".repeat(33)] {
            let err = SecretCipher::from_key_hex(&SecretString::from(bad.to_owned()))
                .expect_err("refused");
            assert!(err.to_string().contains("64 hex characters"), "{err}");
        }
        assert_eq!(format!("{a:?}"), "SecretCipher(..)");
    }
}
