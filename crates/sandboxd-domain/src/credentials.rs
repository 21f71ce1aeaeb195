//! Secrets. Every password sandboxd hands out or keeps is 32 hex characters from a CSPRNG and lives
//! in a `SecretString`, whose `Debug` never shows it.

use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

/// 32 hex characters (128 bits) from the thread-local CSPRNG (ChaCha seeded by the OS).
pub fn generate_secret() -> SecretString {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(hex::encode(bytes))
}

/// SHA-256 of a secret as lowercase hex: the form Redis ACL rules accept (`#<hash>`), so a
/// plaintext password never has to appear on a command line or in a container spec.
pub fn sha256_hex(secret: &SecretString) -> String {
    hex::encode(Sha256::digest(secret.expose_secret().as_bytes()))
}

/// A user and its password.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: SecretString,
}

impl Credentials {
    pub fn generate(user: &str) -> Self {
        Self {
            user: user.to_owned(),
            password: generate_secret(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_32_hex_and_distinct() {
        let a = generate_secret();
        let b = generate_secret();
        assert_eq!(a.expose_secret().len(), 32);
        assert!(a.expose_secret().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.expose_secret(), b.expose_secret());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let creds = Credentials::generate("sandbox");
        let shown = format!("{creds:?}");
        assert!(!shown.contains(creds.password.expose_secret()), "{shown}");
    }
}
