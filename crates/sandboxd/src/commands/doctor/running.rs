//! The lines `doctor` asks the running daemon for (its admin API, as every operator command
//! reaches it): the master switch, the warm pools, the clone sources. What the daemon cannot
//! answer is said as such, never guessed.

use sandboxd_admin::wire::SourceOut;
use sandboxd_backend::DoctorCheck;
use sandboxd_broker::parse_switch;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
use crate::daemon::ENABLED_ENV;

/// Where the running daemon is: `SANDBOXD_URL`, as every operator command reads it, else the
/// configured listen address.
fn running_daemon() -> Remote {
    Remote {
        url: std::env::var("SANDBOXD_URL").ok().filter(|u| !u.is_empty()),
        json: false,
    }
}

fn client(settings: &Settings) -> Option<AdminClient> {
    AdminClient::new(&running_daemon(), settings).ok()
}

fn on_off(value: bool) -> &'static str {
    if value { "on" } else { "off" }
}

/// The master switch: this environment's `ROBOCO_SANDBOX_DB_ENABLED` (which overrides the
/// stored value for a daemon started with it), and the running daemon's stored and running
/// values when one answers. Off is not a fault of the installation: an optional line.
pub(super) async fn master_switch(settings: &Settings) -> DoctorCheck {
    let subject = "master switch";
    let here = match std::env::var(ENABLED_ENV) {
        Ok(value) => match parse_switch(&value) {
            Some(on) => format!(
                "{ENABLED_ENV}={value} ({}) in this environment overrides the stored value for \
                 a daemon started with it",
                on_off(on)
            ),
            None => {
                return DoctorCheck::missing(
                    subject,
                    format!(
                        "{ENABLED_ENV}={value:?} is not a switch value: `serve` refuses to start"
                    ),
                    format!("set {ENABLED_ENV} to true/false, 1/0, yes/no or on/off, or unset it"),
                );
            }
        },
        Err(_) => format!("{ENABLED_ENV} is not set here: the stored value rules"),
    };
    let running = match client(settings) {
        Some(client) => client.settings().await.ok().map(|reply| reply.value),
        None => None,
    };
    let Some(daemon) = running else {
        return DoctorCheck::ok(
            subject,
            format!("{here}; stored value: see `sandboxd settings` (no running daemon answered)"),
        );
    };
    let source = match daemon.env_override {
        Some(value) => format!("from the {ENABLED_ENV}={} override", on_off(value)),
        None => "from the stored value".to_owned(),
    };
    let detail = format!(
        "{here}; the running daemon: {} ({source}), stored {}",
        on_off(daemon.sandbox_db_enabled_running),
        on_off(daemon.sandbox_db_enabled_stored)
    );
    if daemon.sandbox_db_enabled_running {
        DoctorCheck::ok(subject, detail)
    } else {
        DoctorCheck::unavailable(
            subject,
            format!("{detail}: agents get sandbox_disabled"),
            "`sandboxd settings set sandbox_db_enabled=true`, then restart the daemon",
        )
    }
}

/// One line per warm pool: the running daemon's view of it (a pool that backs off is reported
/// with its cause), or what the config file says when no daemon answers.
pub(super) async fn pools(settings: &Settings) -> Vec<DoctorCheck> {
    let running = match client(settings) {
        Some(client) => client.pools().await.ok().map(|reply| reply.value),
        None => None,
    };
    let Some(running) = running else {
        return settings
            .pools
            .iter()
            .map(|(engine, configured)| {
                DoctorCheck::ok(
                    format!("warm pool {engine}"),
                    format!(
                        "configured: min_idle {}, max_total {} (no running daemon answered; \
                         `sandboxd pools` shows its state)",
                        configured.min_idle,
                        configured.max_total()
                    ),
                )
            })
            .collect();
    };
    running
        .iter()
        .map(|pool| {
            let subject = format!("warm pool {}", pool.pool);
            let state = crate::commands::pools::state_of(pool);
            if pool.backing_off_ms.is_some() {
                DoctorCheck::missing(
                    subject,
                    state,
                    "fix the cause (an image or binary missing, a feature not installed); the \
                     pool tries again by itself, at once after `sandboxd pools set`",
                )
            } else {
                DoctorCheck::ok(
                    subject,
                    format!(
                        "{state}: {} of {} idle on {}, {} handed out",
                        pool.idle, pool.target, pool.backend, pool.handed_out
                    ),
                )
            }
        })
        .collect()
}

/// Two lines per clone source the running daemon knows: the source's version and its last
/// snapshot's age, or why there is none; and how it is reached over TLS, missing when its host
/// is not loopback and its mode checks no certificate. Nothing when no daemon answers or none
/// is registered.
pub(super) async fn sources(settings: &Settings) -> Vec<DoctorCheck> {
    let Some(client) = client(settings) else {
        return vec![];
    };
    let Ok(reply) = client.sources().await else {
        return vec![];
    };
    reply
        .value
        .iter()
        .flat_map(|source| [snapshot_check(source), tls_check(source)])
        .collect()
}

fn tls_check(source: &SourceOut) -> DoctorCheck {
    let subject = format!("clone source {} TLS", source.name);
    match &source.tls {
        None => DoctorCheck::missing(
            subject,
            "its DSN cannot be read",
            format!(
                "register it again: `sandboxd sources add {} --dsn -`",
                source.name
            ),
        ),
        Some(tls) => match &tls.warning {
            None => DoctorCheck::ok(subject, tls.summary.clone()),
            Some(warning) => DoctorCheck::missing(
                subject,
                warning.clone(),
                format!(
                    "register it again with sslmode=verify-full sslrootcert=/path/ca.pem: \
                     `sandboxd sources add {} --dsn -`",
                    source.name
                ),
            ),
        },
    }
}

fn snapshot_check(source: &SourceOut) -> DoctorCheck {
    let subject = format!("clone source {}", source.name);
    match (&source.snapshot, &source.last_error) {
        (_, Some(error)) => DoctorCheck::missing(
            subject,
            format!("the last snapshot failed: {error}"),
            format!(
                "make the source reachable from sandboxd with its DSN's role, then \
                 `sandboxd sources snapshot {}`",
                source.name
            ),
        ),
        (Some(snapshot), None) => DoctorCheck::ok(
            subject,
            format!(
                "{}, snapshot {} old ({})",
                snapshot.server_version,
                sandboxd_domain::clock::format_age_since(snapshot.taken_at_ms),
                source.privacy
            ),
        ),
        (None, None) => DoctorCheck::missing(
            subject,
            "no snapshot yet: clones of it are refused".to_owned(),
            format!("`sandboxd sources snapshot {}`", source.name),
        ),
    }
}
