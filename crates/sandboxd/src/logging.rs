//! Logs: which targets log at which verbosity, and the redactor every line passes through
//! before it reaches stderr.
//!
//! Two layers keep credentials out of the log:
//! 1. **The filter.** Our crates log at `info` (`-v`: plus a line when each span closes),
//!    `debug` (`-vv`) or `trace` (`-vvv`); every dependency stays at `warn` at every `-v` level,
//!    because some of them print payloads when asked for more (rmcp whole MCP messages, so the
//!    passwords `request_sandbox` hands out; bollard container specs and inspect answers; sqlx and
//!    the database drivers their statements; hyper, reqwest and tower-http requests).
//!    `SANDBOXD_LOG` replaces the filter: naming a dependency there (or a bare level such as
//!    `trace`) turns it on, and is the operator's explicit choice.
//! 2. **The redactor** ([`redact`]), for when a dependency is on anyway: every formatted line
//!    is scanned and the shapes of sandboxd's secrets are blanked before it is written. Every
//!    password sandboxd generates is exactly 32 hex characters
//!    (`sandboxd_domain::credentials::generate_secret`), an agent token is `sbx_<64 hex>` and a
//!    generated admin token `sbxadm_<64 hex>`, and a minted Postgres account's SCRAM verifier
//!    starts `SCRAM-SHA-256$`. Longer hex runs (a container id, a SHA-256) stay readable.
//!
//! And one layer keeps the log's lines the daemon's own: the same writer escapes every control
//! character ([`escape_controls`]: newlines, carriage returns, other C0 and C1 controls, DEL) but
//! the newline that ends each line, so a value an agent or a client chose — a role name, a
//! statement a dependency logs at `trace` — can neither forge a line nor send a terminal
//! sequence. (ESC is let through only when the log goes to a terminal in colour: the formatter's
//! colours use it, and the formatter already escapes ESC inside every value.)

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// The environment variable whose filter replaces the built-in one.
pub const LOG_ENV: &str = "SANDBOXD_LOG";

/// What a blanked secret reads as.
pub const REDACTED: &str = "[redacted]";

/// Our crates: the only targets `-v` raises.
const OURS: [&str; 8] = [
    "sandboxd",
    "sandboxd_domain",
    "sandboxd_backend",
    "sandboxd_store",
    "sandboxd_experiments",
    "sandboxd_broker",
    "sandboxd_mcp",
    "sandboxd_admin",
];

/// The built-in filter for `verbose` (`-v` count) of a daemon or a one-shot command: our crates
/// at `info`/`debug`/`trace` (one-shot commands: `warn` without `-v`, their progress has its own
/// display), dependencies at `warn` always.
pub fn default_filter(verbose: u8, daemon: bool) -> String {
    let ours = match (verbose, daemon) {
        (0, false) => return "warn".to_owned(),
        (0, true) | (1, _) => "info",
        (2, _) => "debug",
        _ => "trace",
    };
    let mut filter = "warn".to_owned();
    for target in OURS {
        filter.push_str(&format!(",{target}={ours}"));
    }
    filter
}

/// Installs the global subscriber: stderr through the redactor, `SANDBOXD_LOG` or the built-in
/// filter, and from `-v` on one line when each span closes (with how long it took).
pub fn init(verbose: u8, daemon: bool) {
    let filter = EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| EnvFilter::new(default_filter(verbose, daemon)));
    let span_events = if verbose > 0 {
        FmtSpan::CLOSE
    } else {
        FmtSpan::NONE
    };
    // Colours only for a person at a terminal; a log file or a collector gets plain text.
    let colours = io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(span_events)
        .with_ansi(colours)
        .with_writer(Redacting::new(io::stderr, colours))
        .init();
}

/// A [`MakeWriter`] whose writers redact and escape every line before the inner writer sees
/// it.
#[derive(Debug, Clone)]
pub struct Redacting<M> {
    inner: M,
    /// The formatter writes colours: ESC is its own, not escaped.
    colours: bool,
}

impl<M> Redacting<M> {
    pub fn new(inner: M, colours: bool) -> Self {
        Self { inner, colours }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            colours: self.colours,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer_for(meta),
            colours: self.colours,
        }
    }
}

/// Redacts, then escapes, each buffer it is given. The fmt layer formats an event completely
/// and hands it over in one `write_all`, and `write` consumes the whole buffer, so a secret is
/// never split between two calls and the buffer's last newline is the line's end.
#[derive(Debug)]
pub struct RedactingWriter<W> {
    inner: W,
    colours: bool,
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Redacted first: an escape's digits next to a secret could hide its length.
        let redacted = redact_bytes(buf);
        self.inner
            .write_all(&escape_controls(&redacted, self.colours))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` with every control character written as an escape: `\n`, `\r`, `\t`, other C0
/// controls and DEL as `\xNN`, C1 controls (U+0080–U+009F) as `\u{NN}`. A single newline that
/// ends `line` stays: it is the line's end. ESC stays when `keep_esc` (the formatter's colours).
pub fn escape_controls(line: &[u8], keep_esc: bool) -> Cow<'_, [u8]> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let needs = |i: usize, b: u8| {
        (b < 0x20 && !(keep_esc && b == 0x1b))
            || b == 0x7f
            || (b == 0xc2 && body.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    };
    if !body.iter().enumerate().any(|(i, &b)| needs(i, b)) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if !needs(i, b) {
            out.push(b);
            i += 1;
            continue;
        }
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0xc2 => {
                // Two bytes in UTF-8: C2 80..9F is U+0080..U+009F.
                out.extend_from_slice(format!("\\u{{{:x}}}", body[i + 1]).as_bytes());
                i += 1;
            }
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
        i += 1;
    }
    out.extend_from_slice(&line[body.len()..]);
    Cow::Owned(out)
}

/// `text` with every secret-shaped run blanked (see [`redact_bytes`]).
pub fn redact(text: &str) -> Cow<'_, str> {
    match redact_bytes(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        // Only ASCII runs are replaced, by ASCII, so the bytes are still UTF-8.
        Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// Token prefixes, longest first so `sbxadm_` is not read as `sbx` + `adm_…`.
const TOKEN_PREFIXES: [&[u8]; 2] = [b"sbxadm_", b"sbx_"];

/// What starts a Postgres SCRAM verifier (`SCRAM-SHA-256$<iterations>:<salt>$<stored key>:<server
/// key>`): a minted account's `PASSWORD '…'` carries one, and a database driver at `debug` logs
/// the statement.
const SCRAM_PREFIX: &[u8] = b"SCRAM-SHA-256$";

/// The bytes of a verifier's body: base64, and the `$` and `:` between its parts.
fn in_verifier(byte: &u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'=' | b'$' | b':')
}

/// The length of a generated password (`generate_secret`: 16 random bytes, hex).
const SECRET_HEX_LEN: usize = 32;

/// Blanks, in `bytes`:
/// - every run of exactly 32 hex digits (either case) with no hex digit right before or after
///   it (the two digits of a `\xNN` escape before it do not count): a generated password,
///   wherever it sits (JSON, a URL's userinfo, `KEY=value`, a quoted SQL literal);
/// - the body of every `sbx_…` / `sbxadm_…` token (the alphanumeric run after the prefix),
///   keeping the prefix so the line still says which kind of token it was.
/// - the body of every SCRAM verifier, keeping `SCRAM-SHA-256$`: it is what the server checks
///   a login against, as good as a hash of the password.
///
/// Hex runs of any other length (a 64-hex container id or SHA-256, a 40-hex SHA-1) are kept.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0; // bytes[..copied] are already in `out`
    let mut i = 0;
    while i < bytes.len() {
        let after_word_break = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if after_word_break
            && let Some(prefix) = TOKEN_PREFIXES.iter().find(|p| bytes[i..].starts_with(p))
        {
            let body_start = i + prefix.len();
            let body_end = run_end(bytes, body_start, u8::is_ascii_alphanumeric);
            if body_end > body_start {
                blank(&mut out, bytes, &mut copied, body_start..body_end);
            }
            i = body_end;
            continue;
        }
        if bytes[i..].starts_with(SCRAM_PREFIX) {
            let body_start = i + SCRAM_PREFIX.len();
            let body_end = run_end(bytes, body_start, in_verifier);
            if body_end > body_start {
                blank(&mut out, bytes, &mut copied, body_start..body_end);
            }
            i = body_end;
            continue;
        }
        if bytes[i].is_ascii_hexdigit() {
            let end = run_end(bytes, i, u8::is_ascii_hexdigit);
            // After `\x`, the run may start with the two digits of an escape (the formatter
            // writes ESC as `\x1b`), which are not part of what follows them.
            let after_escape = i >= 2 && &bytes[i - 2..i] == b"\\x";
            let secret_start = if end - i == SECRET_HEX_LEN {
                Some(i)
            } else if after_escape && end - i == SECRET_HEX_LEN + 2 {
                Some(i + 2)
            } else {
                None
            };
            if let Some(start) = secret_start {
                blank(&mut out, bytes, &mut copied, start..end);
            }
            i = end;
            continue;
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(bytes),
        Some(mut out) => {
            out.extend_from_slice(&bytes[copied..]);
            Cow::Owned(out)
        }
    }
}

/// Writes into `out` what of `bytes` lies before `span` and is not written yet, then
/// [`REDACTED`] in place of `span`.
fn blank(
    out: &mut Option<Vec<u8>>,
    bytes: &[u8],
    copied: &mut usize,
    span: std::ops::Range<usize>,
) {
    let out = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
    out.extend_from_slice(&bytes[*copied..span.start]);
    out.extend_from_slice(REDACTED.as_bytes());
    *copied = span.end;
}

/// The end of the run of bytes matching `class` that starts at `start`.
fn run_end(bytes: &[u8], start: usize, class: impl Fn(&u8) -> bool) -> usize {
    bytes[start..]
        .iter()
        .position(|b| !class(b))
        .map_or(bytes.len(), |n| start + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "0123456789abcdef0123456789abcdef";
    const ID64: &str = "4f1c2a9e8d7b6c5a4f1c2a9e8d7b6c5a4f1c2a9e8d7b6c5a4f1c2a9e8d7b6c5a";

    #[test]
    fn a_password_in_json_is_blanked() {
        let line = format!(r#"response: {{"password":"{PW}","port":5432}}"#);
        assert_eq!(
            redact(&line),
            r#"response: {"password":"[redacted]","port":5432}"#
        );
        // JSON inside a JSON string (an MCP text content) escapes the quotes.
        let nested = format!(r#"{{"text":"{{\"password\":\"{PW}\"}}"}}"#);
        assert!(!redact(&nested).contains(PW), "{}", redact(&nested));
    }

    #[test]
    fn a_password_in_a_url_and_an_env_assignment_is_blanked() {
        let url = format!("DATABASE_URL=postgresql://sandbox:{PW}@127.0.0.1:5432/sandbox");
        assert_eq!(
            redact(&url),
            "DATABASE_URL=postgresql://sandbox:[redacted]@127.0.0.1:5432/sandbox"
        );
        let env = format!(r#"Env: ["POSTGRES_PASSWORD={PW}", "PGDATA=/var/lib/pg"]"#);
        assert_eq!(
            redact(&env),
            r#"Env: ["POSTGRES_PASSWORD=[redacted]", "PGDATA=/var/lib/pg"]"#
        );
        let upper = format!("IDENTIFIED BY '{}'", PW.to_uppercase());
        assert_eq!(redact(&upper), "IDENTIFIED BY '[redacted]'");
        // At the very start and end of a line too.
        assert_eq!(redact(PW), REDACTED);
        assert_eq!(redact(&format!("{PW}\n{PW}")), "[redacted]\n[redacted]");
    }

    #[test]
    fn container_ids_and_other_hex_runs_stay_readable() {
        let line = format!("inspecting container {ID64} (sha256:{ID64})");
        assert_eq!(redact(&line), line.as_str());
        assert!(matches!(redact(&line), Cow::Borrowed(_)), "nothing copied");
        let sha1 = "commit 0123456789abcdef0123456789abcdef01234567";
        assert_eq!(redact(sha1), sha1);
        // 31 and 33 hex digits are not a generated password.
        let near = format!("{} {}", &PW[1..], format_args!("{PW}a"));
        assert_eq!(redact(&near), near.as_str());
        let uuid = "session 5f0c9a3e-1b2d-4c5e-8f7a-0b1c2d3e4f5a";
        assert_eq!(redact(uuid), uuid);
    }

    #[test]
    fn tokens_are_blanked_but_keep_their_kind() {
        let agent = format!("Authorization: Bearer sbx_{ID64}");
        assert_eq!(redact(&agent), "Authorization: Bearer sbx_[redacted]");
        let admin = format!("token=sbxadm_{ID64}; next");
        assert_eq!(redact(&admin), "token=sbxadm_[redacted]; next");
        // Not a token: the prefix inside a word, or nothing after it.
        assert_eq!(redact("mysbx_thing sbx_ end"), "mysbx_thing sbx_ end");
    }

    #[test]
    fn a_scram_verifier_is_blanked_but_keeps_its_kind() {
        let verifier = "SCRAM-SHA-256$4096:k+NA3j3465uQuLMru9pNWw==$MfL6QkBZEkKPjnb3ateZKF4P\
                        eXYNBbazBh2CKYDsecg=:F5JZkyyDm4/me0FJxQmNgmVjrs0bHtnymT6C/MrXBPk=";
        let line = format!("CREATE ROLE \"sandbox\" LOGIN PASSWORD '{verifier}'; ALTER …");
        assert_eq!(
            redact(&line),
            "CREATE ROLE \"sandbox\" LOGIN PASSWORD 'SCRAM-SHA-256$[redacted]'; ALTER …"
        );
    }

    #[test]
    fn a_password_after_an_escape_is_still_blanked() {
        // The formatter writes ESC in a value as `\x1b`: its `1b` must not lengthen the run.
        let line = format!("role=\\x1b{PW} done");
        assert_eq!(redact(&line), "role=\\x1b[redacted] done");
        // An escape is only `\x` and two digits: a longer run after it is no secret; a bare
        // `\x` before a secret (a bytea literal) hides nothing either.
        let longer = format!("\\x1b{PW}0");
        assert_eq!(redact(&longer), longer.as_str());
        assert_eq!(redact(&format!("'\\x{PW}'")), "'\\x[redacted]'");
    }

    #[test]
    fn control_characters_are_escaped_but_the_line_end_stays() {
        let forged = "role dev\n2026-12-04T00:00:00Z  INFO forged\r\x1b[31m\x07\t\x7f\u{85}é\n";
        let escaped = escape_controls(forged.as_bytes(), false);
        assert_eq!(
            String::from_utf8(escaped.into_owned()).expect("utf-8"),
            "role dev\\n2026-12-04T00:00:00Z  INFO forged\\r\\x1b[31m\\x07\\t\\x7f\\u{85}é\n"
        );
        // Nothing to escape: nothing copied; only the last newline is the line's.
        assert!(matches!(
            escape_controls(b"plain line\n", false),
            Cow::Borrowed(_)
        ));
        assert_eq!(&*escape_controls(b"a\n\n", false), b"a\\n\n");
        // In colour, the formatter's ESC stays; everything else is escaped still.
        assert_eq!(
            &*escape_controls(b"\x1b[2mINFO\x1b[0m x\ny\n", true),
            b"\x1b[2mINFO\x1b[0m x\\ny\n"
        );
    }

    #[test]
    fn the_writer_redacts_what_it_writes() {
        let mut sink = Vec::new();
        let mut writer = RedactingWriter {
            inner: &mut sink,
            colours: false,
        };
        let line = format!("user sandbox password {PW} é\n");
        writer.write_all(line.as_bytes()).expect("write");
        assert_eq!(
            String::from_utf8(sink).expect("utf-8"),
            "user sandbox password [redacted] é\n"
        );
    }

    #[test]
    fn dependencies_stay_at_warn_at_every_verbosity() {
        assert_eq!(default_filter(0, false), "warn");
        for verbose in 0..=5 {
            let filter = default_filter(verbose, true);
            let mut directives = filter.split(',');
            assert_eq!(directives.next(), Some("warn"), "{filter}");
            for directive in directives {
                let (target, _) = directive.split_once('=').expect("target=level");
                assert!(OURS.contains(&target), "{target} raised by -v: {filter}");
            }
        }
        assert!(default_filter(1, false).contains("sandboxd_mcp=info"));
        assert!(default_filter(2, true).contains("sandboxd_backend=debug"));
        assert!(default_filter(3, true).contains("sandboxd_broker=trace"));
    }
}
