//! `sandboxd doctor`: what is installed, what is missing, and what to install.

use std::collections::BTreeMap;
use std::process::ExitCode;

use std::sync::Arc;

use futures::future::join_all;
use sandboxd_backend::{Backend, DoctorCheck, FeatureProbe, ListedInstance, Sweep};
use sandboxd_domain::instance::BackendKind;
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, engines};

use sandboxd_admin::wire::SourceOut;

use crate::backends;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long)]
    pub json: bool,
}

pub async fn checks(settings: &Settings) -> Vec<DoctorCheck> {
    let (progress, _) = output::progress();
    let mut checks = Vec::new();
    // The backends built here are the ones probed for features below (one that cannot run an
    // engine is skipped there).
    let mut built: Vec<Arc<dyn Backend>> = Vec::new();
    match backends::process(settings, progress) {
        Ok(process) => {
            checks.extend(process.doctor().await);
            built.push(Arc::new(process));
        }
        Err(err) => checks.push(DoctorCheck::missing(
            "process backend",
            err.to_string(),
            "see the message",
        )),
    }
    match backends::docker(settings) {
        Ok(docker) => {
            checks.extend(docker.doctor().await);
            built.push(Arc::new(docker));
        }
        Err(err) => checks.push(DoctorCheck::missing(
            "docker backend",
            err.to_string(),
            "fix the [docker] settings",
        )),
    }
    if settings.kubernetes_wanted() {
        match backends::kubernetes(settings) {
            Ok(kube) => {
                checks.extend(kube.doctor().await);
                built.push(Arc::new(kube));
            }
            Err(err) => checks.push(DoctorCheck::missing(
                "kubernetes backend",
                err.to_string(),
                "fix the [kubernetes] settings",
            )),
        }
    }
    checks.extend(features(&built).await);
    checks.extend(versions(&built).await);
    checks.push(makers(&super::ls::list_all(settings).await));
    checks.extend(pools(settings).await);
    checks.extend(sources(settings).await);
    checks.push(experiments(settings));
    checks
}

/// run_experiment's guest: installed, and compiled for this wasmtime or not yet.
fn experiments(settings: &Settings) -> DoctorCheck {
    let subject = "experiment guest";
    let config = match settings.experiments_config() {
        Ok(Some(config)) => config,
        Ok(None) => return DoctorCheck::ok(subject, "turned off (experiments.enabled = false)"),
        Err(err) => return DoctorCheck::missing(subject, err.to_string(), "fix [experiments]"),
    };
    let guest = config.files.component.display();
    match sandboxd_experiments::inspect(&config.files) {
        Ok(true) => DoctorCheck::ok(
            subject,
            format!(
                "{guest}, compiled (wasmtime {})",
                sandboxd_experiments::WASMTIME_VERSION
            ),
        ),
        Ok(false) => DoctorCheck::ok(
            subject,
            format!(
                "{guest}, not compiled yet: the first run compiles it, or `sandboxd experiments prepare`"
            ),
        ),
        Err(err) => DoctorCheck::missing(
            subject,
            err.to_string(),
            "run scripts/build-guest.sh (it needs python3 and PyPI), or set experiments.guest",
        ),
    }
}

/// One line per configured warm pool: the running daemon's view of it (a pool that backs off
/// is reported with its cause), or what is configured when no daemon answers.
async fn pools(settings: &Settings) -> Vec<DoctorCheck> {
    if settings.pools.is_empty() {
        return vec![];
    }
    let remote = running_daemon();
    let running = match crate::client::AdminClient::new(&remote, settings) {
        Ok(client) => client.pools().await.ok().map(|reply| reply.value),
        Err(_) => None,
    };
    settings
        .pools
        .iter()
        .map(|(engine, configured)| {
            let subject = format!("warm pool {engine}");
            let pool = running
                .as_ref()
                .and_then(|pools| pools.iter().find(|p| &p.engine == engine));
            match pool {
                Some(pool) if pool.backing_off_ms.is_some() => DoctorCheck::missing(
                    subject,
                    super::pools::state_of(pool),
                    "fix the cause (an image or binary missing, a feature not installed); the \
                     pool tries again by itself",
                ),
                Some(pool) => DoctorCheck::ok(
                    subject,
                    format!(
                        "{}: {} of {} idle on {}, {} handed out",
                        super::pools::state_of(pool),
                        pool.idle,
                        pool.target,
                        pool.backend,
                        pool.handed_out
                    ),
                ),
                None => DoctorCheck::ok(
                    subject,
                    format!(
                        "configured: min_idle {}, max_total {} (no running daemon answered; \
                         `sandboxd pools` shows its state)",
                        configured.min_idle,
                        configured.max_total()
                    ),
                ),
            }
        })
        .collect()
}

/// Where the running daemon is: `SANDBOXD_URL`, as every operator command reads it, else the
/// configured listen address.
fn running_daemon() -> crate::client::Remote {
    crate::client::Remote {
        url: std::env::var("SANDBOXD_URL").ok().filter(|u| !u.is_empty()),
        json: false,
    }
}

/// Two lines per clone source the running daemon knows: the source's version and its last
/// snapshot's age, or why there is none; and how it is reached over TLS, missing when its host
/// is not loopback and its mode checks no certificate. Nothing when no daemon answers or none
/// is registered.
async fn sources(settings: &Settings) -> Vec<DoctorCheck> {
    let remote = running_daemon();
    let Ok(client) = crate::client::AdminClient::new(&remote, settings) else {
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

/// One line per backend and engine with an allowlist: which features it really provides, found
/// on a throwaway instance (what a daemon on that backend offers its agents), and what to
/// install for the rest.
async fn features(backends: &[Arc<dyn Backend>]) -> Vec<DoctorCheck> {
    // A maker of its own: concurrent doctors and `sandboxd provision` (maker `cli`) never share
    // a Docker network with this run's probes, and its sweep touches nothing of theirs.
    let maker = DaemonId::generate();
    let maker = &maker;
    let probes = backends.iter().flat_map(|backend| {
        engines::with_features().map(move |engine| async move {
            backend.supports(engine).await.ok()?;
            let subject = format!("{} features ({})", engine.name, backend.kind());
            let probe = backend
                .probe_features(engine, &AgentSlug::pool_slot(), maker)
                .await;
            Some(match probe {
                Ok(probe) => feature_check(subject, &probe),
                Err(err) => DoctorCheck::missing(
                    subject,
                    format!("the probe failed: {err}"),
                    "see the message",
                ),
            })
        })
    });
    let checks = join_all(probes).await.into_iter().flatten().collect();
    for backend in backends {
        if let Err(err) = backend.sweep(maker, Sweep::Now).await {
            tracing::debug!(backend = %backend.kind(), error = %err, "sweeping after the feature probes");
        }
    }
    checks
}

fn feature_check(subject: String, probe: &FeatureProbe) -> DoctorCheck {
    let available = format!(
        "{} from {}",
        sandboxd_domain::error::allowed_list(probe.names()),
        probe.source
    );
    if probe.missing.is_empty() {
        return DoctorCheck::ok(subject, available);
    }
    let missing: Vec<&str> = probe.missing.keys().copied().collect();
    let fix: Vec<String> = probe
        .missing
        .iter()
        .map(|(name, why)| format!("{name}: {why}"))
        .collect();
    DoctorCheck::missing(
        subject,
        format!(
            "{available}; missing: {} (agents are not offered them)",
            missing.join(", ")
        ),
        fix.join("; "),
    )
}

/// One line per engine a backend here runs: which server version each backend offers (the
/// process backend's are the host's packages), and, when an image's is newer than the host's,
/// that it is and how to get newer servers on the host.
async fn versions(backends: &[Arc<dyn Backend>]) -> Vec<DoctorCheck> {
    let per_engine = engines::all().map(|engine| async move {
        let offered: Vec<(BackendKind, String)> =
            join_all(backends.iter().map(|backend| async move {
                let version = backend.offered_version(engine).await?;
                Some((backend.kind(), version))
            }))
            .await
            .into_iter()
            .flatten()
            .collect();
        version_check(engine, &offered)
    });
    join_all(per_engine).await.into_iter().flatten().collect()
}

fn version_check(engine: EngineRef, offered: &[(BackendKind, String)]) -> Option<DoctorCheck> {
    if offered.is_empty() {
        return None;
    }
    let listed = offered
        .iter()
        .map(|(kind, version)| format!("{} {version} on {kind}", engine.title))
        .collect::<Vec<_>>()
        .join(", ");
    let host = offered
        .iter()
        .find(|(kind, _)| *kind == BackendKind::Process)
        .map(|(_, version)| version);
    let newer: Vec<String> = offered
        .iter()
        .filter(|(kind, version)| {
            *kind != BackendKind::Process
                && host.is_some_and(|host| sandboxd_backend::versions::is_newer(version, host))
        })
        .map(|(kind, _)| kind.to_string())
        .collect();
    let detail = if newer.is_empty() {
        listed
    } else {
        format!(
            "{listed}: newer on {} than this host's packages; for newer servers on the process backend see README \"Server versions\" (or run this engine on {})",
            newer.join(", "),
            newer.join(" or ")
        )
    };
    Some(DoctorCheck::ok(format!("{} versions", engine.name), detail))
}

/// Who made the instances that run here: each daemon's janitor acts only on its own, so
/// several daemons (and `sandboxd provision`) can share a host.
fn makers(listed: &[ListedInstance]) -> DoctorCheck {
    let mut by_maker: BTreeMap<&DaemonId, usize> = BTreeMap::new();
    for instance in listed {
        *by_maker.entry(&instance.handle.maker).or_default() += 1;
    }
    let detail = if by_maker.is_empty() {
        "none running".to_owned()
    } else {
        by_maker
            .iter()
            .map(|(maker, n)| {
                if **maker == DaemonId::cli() {
                    format!("{n} made by sandboxd provision ({maker})")
                } else if **maker == DaemonId::unknown() {
                    format!("{n} of an unknown maker (made before makers were recorded)")
                } else {
                    format!("{n} made by daemon {maker}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    DoctorCheck::ok("instances", detail)
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let checks = checks(settings).await;
    if args.json {
        println!("{}", output::json(&checks));
    } else {
        let rows = checks
            .iter()
            .map(|c| {
                vec![
                    if c.ok { "ok" } else { "MISSING" }.to_owned(),
                    c.subject.clone(),
                    c.detail.clone(),
                    c.fix.clone().unwrap_or_default(),
                ]
            })
            .collect();
        println!("{}", output::table(&["", "what", "found", "fix"], rows));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_image_than_the_hosts_server_is_said_with_where_to_get_one() {
        let postgres = EngineRef::parse("postgres").expect("registered");
        let older_host = [
            (BackendKind::Process, "15.14".to_owned()),
            (BackendKind::Docker, "17.6".to_owned()),
        ];
        let check = version_check(postgres, &older_host).expect("a line");
        assert_eq!(check.subject, "postgres versions");
        assert!(check.ok, "informative, not a failure: {}", check.detail);
        assert!(
            check.detail.starts_with(
                "PostgreSQL 15.14 on process, PostgreSQL 17.6 on docker: newer on docker"
            ),
            "{}",
            check.detail
        );
        assert!(
            check.detail.contains("\"Server versions\""),
            "{}",
            check.detail
        );
        let same = [
            (BackendKind::Process, "17.6".to_owned()),
            (BackendKind::Docker, "17.6".to_owned()),
        ];
        let check = version_check(postgres, &same).expect("a line");
        assert!(!check.detail.contains("newer"), "{}", check.detail);
        assert!(version_check(postgres, &[]).is_none());
    }
}
