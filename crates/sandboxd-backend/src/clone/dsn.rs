//! A source's DSN, as libpq takes it (`key=value` pairs or a `postgresql://` URL): its TLS keys
//! (`sslmode`, `sslrootcert`) taken out and read into a [`SourceTls`], the rest parsed by
//! tokio-postgres, whose parser knows neither `verify-*` nor `sslrootcert`. The DSN is the
//! operator's secret: no error here quotes it, and [`redact`] blanks it and its password from
//! a message that might.

use std::borrow::Cow;
use std::net::IpAddr;
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::SourceError;
use super::tls::SourceTls;

/// libpq's TLS keys that sandboxd does not carry out (client certificates, CRLs, protocol
/// bounds): refused by name rather than dropped, so a DSN never means less than it says.
const UNSUPPORTED_TLS_KEYS: &[&str] = &[
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslcompression",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "requiressl",
    "gssencmode",
];

/// A parsed DSN: tokio-postgres's configuration (its `sslmode` set from the TLS posture) and
/// that posture.
pub(crate) struct SourceDsn {
    pub config: Config,
    pub tls: SourceTls,
}

impl SourceDsn {
    pub fn parse(dsn: &SecretString) -> Result<Self, SourceError> {
        let (rest, keys) = take_tls_keys(dsn.expose_secret())?;
        // The parser's message can quote the string it failed on.
        let mut config = Config::from_str(&rest).map_err(|_| {
            SourceError::BadDsn(
                "check its syntax (key=value pairs or a postgresql:// URL, as libpq takes)".into(),
            )
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(SourceError::BadDsn("it names no host".into()));
        }
        let tls = SourceTls::new(
            keys.sslmode.as_deref(),
            keys.sslrootcert.as_deref(),
            loopback(&config),
        )
        .map_err(SourceError::BadDsn)?;
        if tls.mode == super::tls::SslMode::VerifyFull && config.get_hosts().is_empty() {
            return Err(SourceError::BadDsn(
                "sslmode=verify-full checks the certificate against the DSN's host name: name \
                 it with host= (hostaddr= may still give the address)"
                    .into(),
            ));
        }
        config.ssl_mode(tls.mode.driver());
        Ok(Self { config, tls })
    }
}

/// Whether `dsn` is a connection string a snapshot can use, and how it would be reached. Its
/// syntax and TLS keys are checked, and a CA file it names is read (the system roots are read
/// at each snapshot); nothing connects.
pub fn check_dsn(dsn: &SecretString) -> Result<SourceTls, SourceError> {
    let parsed = SourceDsn::parse(dsn)?;
    if matches!(parsed.tls.roots, Some(super::tls::Roots::File(_))) {
        parsed.tls.load_roots().map_err(SourceError::Roots)?;
    }
    Ok(parsed.tls)
}

/// How the source at `dsn` is reached over TLS, without reading any file (for a listing).
pub fn describe_tls(dsn: &SecretString) -> Result<SourceTls, SourceError> {
    Ok(SourceDsn::parse(dsn)?.tls)
}

/// What `pg_dump` is handed: libpq connection parameters without the password (`key='value'
/// …`, nothing secret: what may sit on a command line, `sslmode` included), the password
/// apart, and the roots a verifying mode trusts as PEM (libpq is told where the dump's
/// script puts them: `root_file`).
pub(crate) struct LibpqInput {
    pub params: String,
    pub password: Option<SecretString>,
    pub roots_pem: Option<String>,
    /// The mode and roots, for an error (`sslmode=verify-full, roots /etc/ca.pem`).
    pub tls: String,
}

/// `dsn` as [`LibpqInput`]. Only what the DSN's parser knows is kept, which is all a DSN that
/// passes [`check_dsn`] can hold.
pub(crate) fn libpq_input(dsn: &SecretString, root_file: &str) -> Result<LibpqInput, SourceError> {
    let SourceDsn { config, tls } = SourceDsn::parse(dsn)?;
    let quote = |value: &str| format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut params = Vec::new();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        params.push(format!("host={}", quote(&hosts.join(","))));
    }
    let addresses: Vec<String> = config
        .get_hostaddrs()
        .iter()
        .map(|a| a.to_string())
        .collect();
    if !addresses.is_empty() {
        params.push(format!("hostaddr={}", quote(&addresses.join(","))));
    }
    let ports: Vec<String> = config.get_ports().iter().map(|p| p.to_string()).collect();
    if !ports.is_empty() {
        params.push(format!("port={}", quote(&ports.join(","))));
    }
    for (key, value) in [
        ("user", config.get_user()),
        ("dbname", config.get_dbname()),
        ("options", config.get_options()),
    ] {
        if let Some(value) = value {
            params.push(format!("{key}={}", quote(value)));
        }
    }
    params.push(format!("sslmode={}", tls.mode));
    let roots_pem = tls.roots_pem().map_err(SourceError::Roots)?;
    if roots_pem.is_some() {
        params.push(format!("sslrootcert={}", quote(root_file)));
    }
    let password = match config.get_password() {
        None => None,
        Some(bytes) => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| SourceError::BadDsn("its password is not UTF-8".into()))?;
            if text.contains(['\n', '\r']) {
                return Err(SourceError::BadDsn(
                    "its password holds a line break".into(),
                ));
            }
            Some(SecretString::from(text.to_owned()))
        }
    };
    Ok(LibpqInput {
        params: params.join(" "),
        password,
        roots_pem,
        tls: tls.short(),
    })
}

/// `text` with the DSN and its password blanked.
pub(crate) fn redact(text: &str, dsn: &SecretString) -> String {
    let mut text = text.replace(dsn.expose_secret(), "[dsn]");
    if let Ok(parsed) = SourceDsn::parse(dsn)
        && let Some(password) = parsed.config.get_password()
        && let Ok(password) = std::str::from_utf8(password)
        && !password.is_empty()
    {
        text = text.replace(password, "[password]");
    }
    text
}

/// Whether every address the DSN connects to is loopback (or a Unix socket): `hostaddr`s when
/// it names them (they are what is dialed), else its hosts.
fn loopback(config: &Config) -> bool {
    let addresses = config.get_hostaddrs();
    if !addresses.is_empty() {
        return addresses.iter().all(IpAddr::is_loopback);
    }
    config.get_hosts().iter().all(|host| match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// The TLS keys a DSN gave.
#[derive(Debug, Default, PartialEq, Eq)]
struct TlsKeys {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

/// `dsn` without its `sslmode` and `sslrootcert`, and their values. Both forms are read the way
/// tokio-postgres reads them, so what is left parses as it would have. A TLS key sandboxd does
/// not carry out is refused by name.
fn take_tls_keys(dsn: &str) -> Result<(String, TlsKeys), SourceError> {
    let mut keys = TlsKeys::default();
    let mut take = |key: &str, value: String| -> Result<bool, SourceError> {
        match key {
            "sslmode" => keys.sslmode = Some(value),
            "sslrootcert" => keys.sslrootcert = Some(value),
            key if UNSUPPORTED_TLS_KEYS.contains(&key) => {
                return Err(SourceError::BadDsn(format!(
                    "{key} is not supported (sandboxd checks the server's certificate with \
                     sslmode and sslrootcert; it presents no client certificate)"
                )));
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = match url_body(dsn) {
        Some(body) => take_from_url(dsn, body, &mut take)?,
        None => take_from_pairs(dsn, &mut take)?,
    };
    Ok((rest, keys))
}

/// The part of a `postgres://` or `postgresql://` URL after its scheme.
fn url_body(dsn: &str) -> Option<&str> {
    ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| dsn.strip_prefix(prefix))
}

type Take<'a> = dyn FnMut(&str, String) -> Result<bool, SourceError> + 'a;

/// A URL's query parameters: they start at the first `?` after the credentials (which end at
/// the first `@`), and are `&`-separated, percent-encoded `key=value`s.
fn take_from_url(dsn: &str, body: &str, take: &mut Take<'_>) -> Result<String, SourceError> {
    let after_credentials = body.find('@').map_or(0, |at| at + 1);
    let Some(question) = body[after_credentials..].find('?') else {
        return Ok(dsn.to_owned());
    };
    let query_start = dsn.len() - body.len() + after_credentials + question;
    let (head, query) = (&dsn[..query_start], &dsn[query_start + 1..]);
    let mut kept = Vec::new();
    for piece in query.split('&') {
        let taken = match piece.split_once('=') {
            Some((key, value)) => match (decode(key), decode(value)) {
                (Some(key), Some(value)) => take(&key, value.into_owned())?,
                _ => false,
            },
            None => false,
        };
        if !taken {
            kept.push(piece);
        }
    }
    Ok(if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    })
}

fn decode(text: &str) -> Option<Cow<'_, str>> {
    percent_decode_str(text).decode_utf8().ok()
}

/// `key = value` pairs separated by whitespace; a value is bare (a backslash escapes the next
/// character) or single-quoted (likewise). Each TLS pair's span is cut out of the text. On
/// anything the grammar does not allow, the text is left as it is for tokio-postgres's parser
/// to refuse.
fn take_from_pairs(dsn: &str, take: &mut Take<'_>) -> Result<String, SourceError> {
    let chars: Vec<(usize, char)> = dsn.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let offset = |i: usize| chars.get(i).map_or(dsn.len(), |&(o, _)| o);
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    loop {
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        let start = i;
        while at(i).is_some_and(|c| !c.is_whitespace() && c != '=') {
            i += 1;
        }
        if i == start {
            break;
        }
        let key = &dsn[offset(start)..offset(i)];
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        if at(i) != Some('=') {
            return Ok(dsn.to_owned());
        }
        i += 1;
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        let mut value = String::new();
        if at(i) == Some('\'') {
            i += 1;
            loop {
                match at(i) {
                    None => return Ok(dsn.to_owned()),
                    Some('\'') => break,
                    Some('\\') => {
                        value.extend(at(i + 1));
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
            i += 1;
        } else {
            while let Some(c) = at(i).filter(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(at(i + 1));
                    i += 2;
                } else {
                    value.push(c);
                    i += 1;
                }
            }
            if value.is_empty() {
                return Ok(dsn.to_owned());
            }
        }
        if take(key, value)? {
            cut.push((offset(start), offset(i)));
        }
    }
    let mut rest = String::with_capacity(dsn.len());
    let mut from = 0;
    for (start, end) in cut {
        rest.push_str(&dsn[from..start]);
        from = end;
    }
    rest.push_str(&dsn[from..]);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::super::tls::{Roots, SslMode};
    use super::*;

    fn parsed(dsn: &str) -> SourceDsn {
        SourceDsn::parse(&SecretString::from(dsn.to_owned()))
            .unwrap_or_else(|e| panic!("{dsn}: {e}"))
    }

    #[test]
    fn tls_keys_come_out_of_both_forms_and_the_rest_parses_as_before() {
        let pairs = parsed(
            "host=db.example sslmode = verify-full  user=ro sslrootcert='/etc/ssl/prod ca.pem' \
             password=p\\ w dbname=shop",
        );
        assert_eq!(pairs.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            pairs.tls.roots,
            Some(Roots::File("/etc/ssl/prod ca.pem".into()))
        );
        assert_eq!(pairs.config.get_user(), Some("ro"));
        assert_eq!(pairs.config.get_password(), Some(&b"p w"[..]));
        assert_eq!(pairs.config.get_dbname(), Some("shop"));
        assert_eq!(
            pairs.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let url = parsed(
            "postgresql://ro:s%3Fc%40r@db.example:6432/shop?sslmode=verify-ca&\
             sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        );
        assert_eq!(url.tls.mode, SslMode::VerifyCa);
        assert_eq!(url.tls.roots, Some(Roots::File("/etc/ca.pem".into())));
        assert_eq!(url.config.get_password(), Some(&b"s?c@r"[..]));
        assert_eq!(url.config.get_application_name(), Some("x"));
        assert_eq!(url.config.get_ports(), [6432]);
        let bare = parsed("postgresql://db.example/shop?sslmode=require");
        assert_eq!(bare.tls.mode, SslMode::Require);
        assert_eq!(bare.config.get_dbname(), Some("shop"));
    }

    #[test]
    fn the_default_depends_on_the_host() {
        for (dsn, mode) in [
            ("host=db.example dbname=d", SslMode::VerifyFull),
            ("host=10.1.2.3 dbname=d", SslMode::VerifyFull),
            ("host=127.0.0.1 dbname=d", SslMode::Prefer),
            ("host=localhost dbname=d", SslMode::Prefer),
            ("host=/run/postgresql dbname=d", SslMode::Prefer),
            ("postgresql://[::1]:5432/d", SslMode::Prefer),
            // What is dialed decides.
            (
                "host=db.example hostaddr=127.0.0.1 dbname=d",
                SslMode::Prefer,
            ),
            (
                "host=localhost hostaddr=10.0.0.5 dbname=d",
                SslMode::VerifyFull,
            ),
            ("host=127.0.0.1,db.example dbname=d", SslMode::VerifyFull),
        ] {
            assert_eq!(parsed(dsn).tls.mode, mode, "{dsn}");
        }
    }

    #[test]
    fn refusals_name_the_problem_and_never_quote_the_dsn() {
        for (dsn, names) in [
            ("host=db sslmode=verify-all password=hunter2", "sslmode"),
            ("host=db sslcert=/c.pem password=hunter2", "sslcert"),
            ("postgresql://u:hunter2@db/d?sslkey=/k.pem", "sslkey"),
            ("host=db sslrootcert=ca.pem password=hunter2", "absolute"),
            (
                "hostaddr=10.0.0.5 sslmode=verify-full password=hunter2",
                "host name",
            ),
            ("dbname=d password=hunter2", "no host"),
            ("host= = hunter2", "syntax"),
        ] {
            let err = SourceDsn::parse(&SecretString::from(dsn))
                .err()
                .unwrap_or_else(|| panic!("{dsn} is refused"))
                .to_string();
            assert!(err.contains(names), "{dsn}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn pg_dump_gets_the_parameters_the_mode_and_the_password_apart() {
        let url = SecretString::from(
            "postgresql://ro:s3cr%27t@db.example:6432/shop?sslmode=disable".to_owned(),
        );
        let input = libpq_input(&url, "/tmp/root.crt").expect("valid");
        assert_eq!(
            input.params,
            "host='db.example' port='6432' user='ro' dbname='shop' sslmode=disable"
        );
        assert_eq!(
            input.password.expect("a password").expose_secret(),
            "s3cr't"
        );
        assert_eq!(input.roots_pem, None);
        let pairs = SecretString::from("host=/run/pg user=o\\'brien password=x dbname=d");
        let input = libpq_input(&pairs, "/tmp/root.crt").expect("valid");
        assert!(input.params.contains("host='/run/pg'"), "{}", input.params);
        assert!(
            input.params.contains("user='o\\'brien'"),
            "{}",
            input.params
        );
        assert!(input.params.ends_with("sslmode=prefer"), "{}", input.params);
        assert!(!input.params.contains("password"), "{}", input.params);
        let none = SecretString::from("host=127.0.0.1 dbname=d");
        assert!(libpq_input(&none, "/r").expect("valid").password.is_none());
    }

    #[test]
    fn a_verifying_mode_hands_pg_dump_the_ca_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        std::fs::write(&ca, cert.pem()).expect("write");
        let dsn = SecretString::from(format!(
            "host=db.example dbname=d sslmode=verify-full sslrootcert={}",
            ca.display()
        ));
        let tls = check_dsn(&dsn).expect("the CA file is read");
        assert_eq!(tls.roots, Some(Roots::File(ca.clone())));
        let input = libpq_input(&dsn, "/tmp/root.crt").expect("valid");
        assert!(
            input
                .params
                .ends_with("sslmode=verify-full sslrootcert='/tmp/root.crt'"),
            "{}",
            input.params
        );
        let pem = input.roots_pem.expect("the roots");
        assert!(pem.contains("BEGIN CERTIFICATE"), "{pem}");
        let unreadable =
            SecretString::from("host=db.example dbname=d sslrootcert=/nonexistent/ca.pem");
        let err = check_dsn(&unreadable).expect_err("unreadable").to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn redaction_blanks_the_dsn_and_its_password() {
        let dsn = SecretString::from("host=db user=ro password=hunter2-xyz dbname=shop");
        let text = redact(
            "failed for host=db user=ro password=hunter2-xyz dbname=shop and hunter2-xyz",
            &dsn,
        );
        assert!(!text.contains("hunter2-xyz"), "{text}");
        let url = SecretString::from("postgresql://ro:s3cr3t-abc@db:5432/shop?sslmode=require");
        assert!(!redact("oops s3cr3t-abc", &url).contains("s3cr3t-abc"));
    }
}
