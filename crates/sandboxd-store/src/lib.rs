//! The persistent state of sandboxd (§2 of the spec): one [`Store`] handle over SQLite (the
//! default: one file, WAL) or PostgreSQL (for several daemon replicas), from the same code.
//!
//! Parts:
//! - [`db`]: opening a URL, the SQLite file's settings, the compiled-in migrations
//!   (`migrations/*.sql`, portable DDL run at [`Store::open`]).
//! - [`cipher`]: [`SecretCipher`], which seals sandbox credentials before they reach the database.
//! - [`settings`]: persisted operator settings (the store persists; the broker interprets).
//! - [`projects`], [`agents`], [`tasks`]: the records the guard chain reads. Tasks offer
//!   compare-and-set operations ([`Store::claim_next`], [`Store::transition`]); the lifecycle
//!   rules themselves are `sandboxd_domain::lifecycle`, applied by the broker.
//! - [`instances`]: the broker's sandbox cache, persisted so a restart keeps live sandboxes.
//! - [`audit`]: the append-only audit log with filtered, cursor-paged reads.
//! - [`sessions`]: MCP session state with when each was last used (expired and swept by the
//!   broker).
//! - [`leases`]: what replicas sharing one store coordinate through: leases that expire, the
//!   replicas' heartbeats, which replica's pools hold a member.
//!
//! How the SQL stays portable: every query goes through sqlx's `Any` driver with `$N`
//! placeholders, and every column is TEXT or BIGINT (booleans 0/1, JSON as text, times as Unix
//! milliseconds). Values are typed with the domain's validated types on the Rust side and parsed
//! back through their `parse`, so a corrupted row is a [`StoreError::Corrupt`], never a panic.
//!
//! **Architecture invariant:** this is the only crate that imports sqlx; no sqlx type appears in
//! its public API. The store does not decide anything: it does not know what a setting means,
//! which task transitions are allowed, or whether a sandbox is alive. It never holds a
//! credential in plaintext at rest, and never logs one.
#![forbid(unsafe_code)]

pub mod agents;
pub mod audit;
pub mod cipher;
mod conditions;
pub mod db;
pub mod error;
pub mod hand_overs;
mod ids;
pub mod instances;
pub mod leases;
pub mod projects;
pub mod sessions;
pub mod settings;
pub mod sources;
pub mod tasks;

use sandboxd_domain::DaemonId;
use sqlx::AnyPool;

pub use agents::{NewAgent, token_hash};
pub use audit::{NewAuditEntry, StampedAuditEntry};
pub use cipher::SecretCipher;
pub use db::StoreKind;
pub use error::{Result, StoreError};
pub use instances::InstanceSummary;

/// A handle on the store. Cheap to clone: clones share one connection pool and one key.
#[derive(Debug, Clone)]
pub struct Store {
    /// sqlx's pool is itself a shared handle; it bounds concurrent connections (a few for SQLite,
    /// whose writers take turns anyway).
    pool: AnyPool,
    kind: StoreKind,
    cipher: SecretCipher,
    /// The id this store was created with: the maker every instance of its daemon carries.
    daemon: DaemonId,
}

impl Store {
    /// Opens `sqlite:///path/to/file.db` (created if missing, mode 0600, WAL, foreign keys on,
    /// a busy timeout) or `postgres://user:password@host:port/database`, and runs the
    /// migrations. `secrets` seals and opens the stored sandbox credentials.
    pub async fn open(url: &str, secrets: SecretCipher) -> Result<Store> {
        let (pool, kind) = db::connect(url).await?;
        let daemon = settings::daemon_id(&pool).await?;
        Ok(Store {
            pool,
            kind,
            cipher: secrets,
            daemon,
        })
    }

    /// The stable id created with this store (8 hex digits). Replicas sharing one store share
    /// it: they are one daemon to the instances they make.
    pub fn daemon_id(&self) -> &DaemonId {
        &self.daemon
    }

    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// Closes every connection; the handle (and its clones) are unusable afterwards.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
