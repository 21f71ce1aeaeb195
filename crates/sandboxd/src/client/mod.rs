//! A small client for the admin API of a running daemon, used by the operator commands
//! (`projects`, `agents`, `tasks`, `sandboxes`, `settings`, `janitor`). Bodies are sent and
//! answers decoded as `sandboxd_admin::wire` types, the ones the daemon itself encodes.
//!
//! Where: `--url`, else `SANDBOXD_URL`, else `http://<server.listen>`. The admin token:
//! `SANDBOXD_ADMIN_TOKEN`, else the daemon's token file (`server.admin_token_file`, default
//! `<state_dir>/admin.token`); the client only reads it, it never creates one. Plain HTTP: the
//! daemon listens on loopback (put a TLS proxy in front for anything else).

mod routes;

use std::process::ExitCode;

use reqwest::{Method, StatusCode};
use sandboxd_admin::wire::ErrorBody;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Settings;
use crate::daemon::ADMIN_TOKEN_ENV;
use crate::exit::EXIT_INPUT;
use crate::output;

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

    /// One request: the answer's JSON (`Value::Null` for an empty one), or the API's error.
    async fn request(
        &self,
        method: Method,
        path: &str,
        query: &(impl Serialize + ?Sized),
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<(String, Value), ClientError> {
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
            return Ok((url, value));
        }
        // An answer that is not the API's error shape (a proxy's page) still gets a message.
        let body = ErrorBody::deserialize(&value).ok();
        let message = body.as_ref().map_or_else(
            || status.canonical_reason().unwrap_or("error").to_owned(),
            |b| b.message.clone(),
        );
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
                code: body.map_or_else(|| "refused".to_owned(), |b| b.error),
                message,
            });
        }
        Err(ClientError::Server {
            status: status.as_u16(),
            message,
        })
    }

    /// A `GET` with a query (`&()` for none), decoded into its wire type.
    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &(impl Serialize + ?Sized),
    ) -> Result<Reply<T>, ClientError> {
        let (url, json) = self.request(Method::GET, path, query, None::<&()>).await?;
        Reply::decode(&url, json)
    }

    /// Any other request, with an optional JSON body, decoded into its wire type (`()` for an
    /// empty answer).
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Reply<T>, ClientError> {
        let (url, json) = self.request(method, path, &(), body).await?;
        Reply::decode(&url, json)
    }
}

/// An answer of the admin API twice: the JSON exactly as the daemon sent it, which `--json`
/// prints untouched, and the same answer decoded into its `sandboxd_admin::wire` type, which
/// tables are drawn from.
#[derive(Debug)]
pub struct Reply<T> {
    pub json: Value,
    pub value: T,
}

impl<T: DeserializeOwned> Reply<T> {
    fn decode(url: &str, json: Value) -> Result<Self, ClientError> {
        let value = T::deserialize(&json).map_err(|e| ClientError::Unexpected {
            url: url.to_owned(),
            reason: format!("the answer is not the admin API's ({e}); is the daemon this version?"),
        })?;
        Ok(Self { json, value })
    }
}

impl<T> Reply<T> {
    /// Prints the API's JSON with `--json`, else what `show` prints from the decoded answer.
    pub fn print(&self, as_json: bool, show: impl FnOnce(&T)) {
        if as_json {
            println!("{}", output::json(&self.json));
        } else {
            show(&self.value);
        }
    }
}

impl<T> Reply<Vec<T>> {
    /// Prints a list answer: its JSON with `--json`, else `empty` when it holds nothing, else a
    /// table with one `row` per item.
    pub fn print_list(
        &self,
        as_json: bool,
        empty: &str,
        header: &[&str],
        row: impl Fn(&T) -> Vec<String>,
    ) {
        self.print(as_json, |items| {
            if items.is_empty() {
                println!("{empty}");
            } else {
                println!("{}", output::table(header, items.iter().map(row).collect()));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_admin::wire::ProjectOut;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reply_keeps_the_json_as_sent_and_decodes_it() {
        let sent = json!([{
            "slug": "p",
            "sandbox_services": null,
            "sandbox_extensions": null,
            "created_at_ms": 1,
            "updated_at_ms": 2,
            "added_later": "kept for --json"
        }]);
        let reply = Reply::<Vec<ProjectOut>>::decode("u", sent.clone()).expect("decodes");
        assert_eq!(reply.json, sent);
        assert_eq!(reply.value[0].slug, "p");
        assert_eq!(reply.value[0].sandbox_services, None);
        let err = Reply::<Vec<ProjectOut>>::decode("u", json!({"slug": 1})).expect_err("not it");
        assert!(matches!(err, ClientError::Unexpected { .. }), "{err}");
    }
}
