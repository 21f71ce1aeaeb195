//! `[server]`: the daemon's one HTTP listener and its bounds; `[store]`: where the state is kept.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use sandboxd_backend::duration_serde;
use serde::{Deserialize, Serialize};

/// The HTTP server: MCP at `/mcp`, the admin API under `/v1`, the panel, `/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on. Loopback by default; port 0 picks a free port.
    pub listen: String,
    /// Host header values accepted besides loopback names (for a daemon reached by a name).
    pub allowed_hosts: Vec<String>,
    /// Origin header values accepted (browsers); requests without Origin are accepted.
    pub allowed_origins: Vec<String>,
    /// The admin token file (created with a random token when missing). `SANDBOXD_ADMIN_TOKEN`
    /// overrides it.
    pub admin_token_file: Option<PathBuf>,
    /// The largest request body any route accepts (413 past it). Zero would refuse every body,
    /// even an MCP `initialize`.
    pub max_body_bytes: NonZeroUsize,
    /// How long a connection may take to send a request's head, and stay idle between requests;
    /// past it the connection is closed. Zero would cut every connection at once.
    #[serde(rename = "header_timeout_secs", with = "duration_serde::nonzero_secs")]
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive after its head (408 past it).
    #[serde(rename = "body_timeout_secs", with = "duration_serde::nonzero_secs")]
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen queue until one ends. Zero would
    /// serve none.
    pub max_connections: NonZeroU32,
}

impl ServerSettings {
    /// 1 MiB: far above any MCP call or form (a verb's text is capped at 16 KiB), far below what
    /// would hurt the daemon.
    pub const DEFAULT_MAX_BODY_BYTES: NonZeroUsize =
        NonZeroUsize::new(1024 * 1024).expect("1 MiB is not zero");
    /// Every real client sends its head in one write.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// A whole `max_body_bytes` over a slow link.
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// Far more than agents' clients and an operator hold (an MCP client holds one or two), well
    /// under a default file-descriptor limit.
    pub const DEFAULT_MAX_CONNECTIONS: NonZeroU32 = NonZeroU32::new(512).expect("512 is not zero");
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".to_owned(),
            allowed_hosts: vec![],
            allowed_origins: vec![],
            admin_token_file: None,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The state store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// `sqlite:///path/file.db` or `postgres://…`; default `sqlite://<state_dir>/sandboxd.db`.
    pub url: Option<String>,
    /// The key sealing credentials at rest (created when missing); default
    /// `<state_dir>/store.key`.
    pub key_file: Option<PathBuf>,
}
