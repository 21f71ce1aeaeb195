//! A small client for the admin API of a running daemon, used by the operator commands
//! (`projects`, `agents`, `tasks`, `sandboxes`, `settings`, `janitor`).
//!
//! Where: `--url`, else `SANDBOXD_URL`, else `http://<server.listen>`. The admin token:
//! `SANDBOXD_ADMIN_TOKEN`, else the daemon's token file (`server.admin_token_file`, default
//! `<state_dir>/admin.token`); the client only reads it, it never creates one. Plain HTTP: the
//! daemon listens on loopback (put a TLS proxy in front for anything else).

use std::process::ExitCode;

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde_json::Value;

use crate::cli::EXIT_INPUT;
use crate::config::Settings;
use crate::daemon::ADMIN_TOKEN_ENV;

/// How to reach the daemon; every operator command takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct Remote {
    /// The daemon's base URL (default: http://<server.listen>).
    #[arg(long, env = "SANDBOXD_URL", global = true)]
    pub url: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no admin token: set {ADMIN_TOKEN_ENV} or make the daemon's token file {path} readable \
         ({reason})"
    )]
    NoToken { path: String, reason: String },
    #[error(
        "cannot reach sandboxd at {url} ({reason}); is `sandboxd serve` running? (--url or SANDBOXD_URL)"
    )]
    Unreachable { url: String, reason: String },
    /// The daemon refused the request: the caller's mistake (4xx).
    #[error("{message} ({code})")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("sandboxd failed ({status}): {message}")]
    Server { status: u16, message: String },
    #[error("unexpected answer from {url}: {reason}")]
    Unexpected { url: String, reason: String },
}

impl ClientError {
    /// Prints the error; exit code 2 when the daemon refused the input, else 1.
    pub fn fail(&self) -> ExitCode {
        eprintln!("error: {self}");
        match self {
            ClientError::Refused { status, .. } if *status != 401 => ExitCode::from(EXIT_INPUT),
            _ => ExitCode::FAILURE,
        }
    }
}

#[derive(Debug)]
pub struct AdminClient {
    base: String,
    token: SecretString,
    http: reqwest::Client,
}

/// The admin token as the CLI finds it (read only).
pub fn admin_token(settings: &Settings) -> Result<SecretString, ClientError> {
    if let Ok(token) = std::env::var(ADMIN_TOKEN_ENV)
        && !token.trim().is_empty()
    {
        return Ok(SecretString::from(token.trim().to_owned()));
    }
    let path = settings.admin_token_file();
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(SecretString::from(token.trim().to_owned())),
        Ok(_) => Err(ClientError::NoToken {
            path: path.display().to_string(),
            reason: "the file is empty".into(),
        }),
        Err(err) => Err(ClientError::NoToken {
            path: path.display().to_string(),
            reason: err.to_string(),
        }),
    }
}

impl AdminClient {
    pub fn new(remote: &Remote, settings: &Settings) -> Result<Self, ClientError> {
        let base = remote
            .url
            .clone()
            .unwrap_or_else(|| format!("http://{}", settings.server.listen));
        let http = reqwest::Client::builder()
            .user_agent(concat!("sandboxd-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Unexpected {
                url: base.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: admin_token(settings)?,
            http,
        })
    }

    /// One request; the JSON answer (`Value::Null` for an empty one), or the API's error.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .request(method, &url)
            .bearer_auth(self.token.expose_secret())
            .query(query);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| ClientError::Unreachable {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| ClientError::Unexpected {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| ClientError::Unexpected {
                url: url.clone(),
                reason: format!("{status}, not JSON ({e})"),
            })?
        };
        if status.is_success() {
            return Ok(value);
        }
        let message = value["message"]
            .as_str()
            .unwrap_or(status.canonical_reason().unwrap_or("error"))
            .to_owned();
        if status == StatusCode::UNAUTHORIZED {
            return Err(ClientError::Refused {
                status: status.as_u16(),
                code: "unauthorized".into(),
                message: format!(
                    "the daemon refused the admin token ({message}); check {ADMIN_TOKEN_ENV} \
                     or the token file"
                ),
            });
        }
        if status.is_client_error() {
            return Err(ClientError::Refused {
                status: status.as_u16(),
                code: value["error"].as_str().unwrap_or("refused").to_owned(),
                message,
            });
        }
        Err(ClientError::Server {
            status: status.as_u16(),
            message,
        })
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, ClientError> {
        self.call(Method::GET, path, query, None::<&Value>).await
    }
}

/// A string field of an answer ("" when absent).
pub fn text(value: &Value, field: &str) -> String {
    match &value[field] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A list of strings, comma-joined ("" when absent).
pub fn list(value: &Value, field: &str) -> String {
    joined(&value[field])
}

/// An array's items, comma-joined ("" when not an array).
pub fn joined(items: &Value) -> String {
    items
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| i.to_string())
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// "3m", "1h 5m" since a `*_ms` field, in `sandboxd_domain::clock`'s one format.
pub fn age_of(value: &Value, field: &str) -> String {
    value[field]
        .as_i64()
        .map(sandboxd_domain::clock::format_age_since)
        .unwrap_or_default()
}
