//! The store's one error enum. Every variant names the operation that failed; `Conflict` and
//! `NotFound` are the two a caller branches on, everything else is an internal failure to log.
//!
//! The driver's error is kept as a boxed source so `sqlx` types never appear in this crate's API.

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not one the store can use (unknown scheme, an in-memory SQLite database, …).
    #[error("cannot use store URL {url}: {detail}")]
    Url { url: String, detail: String },

    /// Connecting or preparing the database file failed. `url` has its password removed.
    #[error("cannot open the store at {url}: {source}")]
    Open {
        url: String,
        #[source]
        source: Source,
    },

    #[error("migrating the store failed: {source}")]
    Migrate {
        #[source]
        source: Source,
    },

    /// A query failed for a reason the caller cannot fix (connection lost, disk full, …).
    #[error("store operation {op} failed: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: Source,
    },

    /// A row with this key already exists (or another unique value collides).
    #[error("{op}: {what} {id} already exists")]
    Conflict {
        op: &'static str,
        what: &'static str,
        id: String,
    },

    /// The row the operation needs does not exist.
    #[error("{op}: {what} {id} not found")]
    NotFound {
        op: &'static str,
        what: &'static str,
        id: String,
    },

    /// The row exists but is still referenced by others (e.g. deleting a project with agents).
    #[error("{op}: {what} {id} is still in use: {detail}")]
    InUse {
        op: &'static str,
        what: &'static str,
        id: String,
        detail: &'static str,
    },

    /// A stored value no longer parses (hand-edited row, older daemon, …). Never a panic.
    #[error("{op}: stored {what} is corrupt: {detail}")]
    Corrupt {
        op: &'static str,
        what: String,
        detail: String,
    },

    /// Sealed credentials did not open: the key is not the one they were sealed with, or the row
    /// was altered.
    #[error(
        "{op}: cannot decrypt the credentials of sandbox instance {name}: \
         the secret key is not the one they were stored with, or the row was altered"
    )]
    Decrypt { op: &'static str, name: String },

    /// The secret key could not be read, created or parsed.
    #[error("secret key {location}: {detail}")]
    Key { location: String, detail: String },

    /// The caller passed something the store refuses (a bug in the caller, not user input).
    #[error("{op}: {detail}")]
    Invalid { op: &'static str, detail: String },

    /// An atomic operation lost its race more often than any fair contention explains.
    #[error("{op}: gave up after {attempts} attempts under contention")]
    Contention { op: &'static str, attempts: u32 },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database {
            op,
            source: Box::new(source),
        }
    }

    pub(crate) fn corrupt(
        op: &'static str,
        what: impl Into<String>,
        detail: impl std::fmt::Display,
    ) -> StoreError {
        StoreError::Corrupt {
            op,
            what: what.into(),
            detail: detail.to_string(),
        }
    }

    /// Whether the caller's key or reference was the problem (as opposed to the store failing).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
}

/// What a database error means for the caller, read from the driver's error kind so it works the
/// same on SQLite and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    Unique,
    ForeignKey,
    Other,
}

pub(crate) fn violation(err: &sqlx::Error) -> Violation {
    match err {
        sqlx::Error::Database(db) => match db.kind() {
            sqlx::error::ErrorKind::UniqueViolation => Violation::Unique,
            sqlx::error::ErrorKind::ForeignKeyViolation => Violation::ForeignKey,
            _ => Violation::Other,
        },
        _ => Violation::Other,
    }
}
