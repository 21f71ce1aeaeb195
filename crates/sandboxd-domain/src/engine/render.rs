//! How an engine's endpoint is written for agents: a connection URL and the env vars existing
//! test configs read. Declared per engine as an [`EnvRendering`] value and rendered here, once
//! for every engine.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use crate::names::EnvPrefix;

/// The host, port and credentials an agent uses, from which URLs and env are rendered.
#[derive(Debug)]
pub struct Endpoint<'a> {
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    pub password: &'a SecretString,
    pub database: &'a str,
}

/// What follows `host:port/` in an engine's URL.
#[derive(Debug, Clone, Copy)]
pub enum UrlPath {
    /// The agent's database.
    Database,
    /// A fixed path (Redis's database number).
    Fixed(&'static str),
}

/// An engine's URL shape and env var names. Var names other than `url_var` get the
/// configurable prefix (`ROBOCO_TEST` by default): `<prefix>_<name>`.
#[derive(Debug)]
pub struct EnvRendering {
    /// The URL scheme (`postgresql`).
    pub scheme: &'static str,
    pub path: UrlPath,
    /// Appended to the URL as is (`?authSource=admin`); empty for none.
    pub query: &'static str,
    /// The unprefixed variable holding the URL (`DATABASE_URL`).
    pub url_var: &'static str,
    pub host_var: &'static str,
    pub port_var: &'static str,
    pub user_var: &'static str,
    pub password_var: &'static str,
    /// None when the engine has no database name worth exporting.
    pub database_var: Option<&'static str>,
}

impl EnvRendering {
    /// `(url, env)` for the evidence.
    pub fn render(
        &self,
        e: &Endpoint<'_>,
        prefix: &EnvPrefix,
    ) -> (String, BTreeMap<String, String>) {
        let password = e.password.expose_secret();
        let path = match self.path {
            UrlPath::Database => urlencoding::encode(e.database).into_owned(),
            UrlPath::Fixed(path) => path.to_owned(),
        };
        let url = format!(
            "{}://{}:{}@{}:{}/{path}{}",
            self.scheme,
            urlencoding::encode(e.user),
            urlencoding::encode(password),
            e.host,
            e.port,
            self.query
        );
        let mut env = BTreeMap::from([
            (prefix.var(self.host_var), e.host.to_owned()),
            (prefix.var(self.port_var), e.port.to_string()),
            (prefix.var(self.user_var), e.user.to_owned()),
            (prefix.var(self.password_var), password.to_owned()),
            (self.url_var.to_owned(), url.clone()),
        ]);
        if let Some(var) = self.database_var {
            env.insert(prefix.var(var), e.database.to_owned());
        }
        (url, env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_what_needs_it_and_env_gets_the_prefix() {
        let rendering = EnvRendering {
            scheme: "db",
            path: UrlPath::Database,
            query: "?x=1",
            url_var: "DB_URL",
            host_var: "H",
            port_var: "P",
            user_var: "U",
            password_var: "W",
            database_var: Some("D"),
        };
        let password = SecretString::from("p@ss/word");
        let endpoint = Endpoint {
            host: "h",
            port: 7,
            user: "u:1",
            password: &password,
            database: "my db",
        };
        let prefix = EnvPrefix::parse("ACME").expect("valid");
        let (url, env) = rendering.render(&endpoint, &prefix);
        assert_eq!(url, "db://u%3A1:p%40ss%2Fword@h:7/my%20db?x=1");
        assert_eq!(env["ACME_D"], "my db");
        assert_eq!(env["ACME_W"], "p@ss/word");
        assert_eq!(env["DB_URL"], url);
        assert_eq!(env.len(), 6);
    }
}
