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

/// A PostgreSQL SCRAM-SHA-256 verifier for `secret` with a fresh salt (what `ALTER ROLE …
/// PASSWORD` stores), from `postgres-protocol`, the protocol crate under `tokio-postgres`. The
/// daemon sends this instead of the password, so the statement holds no plaintext even if a
/// driver or the server logs it.
pub fn pg_scram_verifier(secret: &SecretString) -> String {
    postgres_protocol::password::scram_sha_256(secret.expose_secret().as_bytes())
}

/// The MySQL/MariaDB `mysql_native_password` hash of `secret` (`*` + SHA1(SHA1(password)) in
/// uppercase hex), for `IDENTIFIED BY PASSWORD '…'`: no plaintext in the statement.
pub fn mysql_native_hash(secret: &SecretString) -> String {
    use sha1::Sha1;
    let stage1 = Sha1::digest(secret.expose_secret().as_bytes());
    let stage2 = Sha1::digest(stage1);
    format!("*{}", hex::encode_upper(stage2))
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
    fn mysql_native_hash_matches_the_server() {
        // SELECT PASSWORD('password') on MariaDB.
        assert_eq!(
            mysql_native_hash(&SecretString::from("password")),
            "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"
        );
    }

    #[test]
    fn scram_verifier_has_the_server_format_and_no_plaintext() {
        let secret = generate_secret();
        let verifier = pg_scram_verifier(&secret);
        assert!(verifier.starts_with("SCRAM-SHA-256$4096:"), "{verifier}");
        assert!(!verifier.contains(secret.expose_secret()));
        assert_ne!(verifier, pg_scram_verifier(&secret), "salted");
    }

    #[test]
    fn debug_never_shows_the_password() {
        let creds = Credentials::generate("sandbox");
        let shown = format!("{creds:?}");
        assert!(!shown.contains(creds.password.expose_secret()), "{shown}");
    }
}
