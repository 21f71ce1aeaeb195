//! `sandboxd doctor`: what is installed, what is missing, and what to install. Required checks
//! (what the configured backend and the daemon need) are told apart from optional ones (an
//! engine or a feature that is only not offered); the exit code is 1 when a required one fails.

mod report;
mod running;

use std::collections::BTreeMap;
use std::process::ExitCode;

use std::sync::Arc;

use futures::future::join_all;
use sandboxd_backend::{Backend, DoctorCheck, FeatureProbe, ListedInstance, Sweep};
use sandboxd_domain::instance::BackendKind;
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, engines};

use crate::backends;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the checks as a JSON array instead: one object per check with `subject`, `ok`,
    /// `required` (false: a failure only means something is not offered), `backend` (when the
    /// check is about one), `detail` and `fix`.
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
            checks.extend(report::from_backend(
                BackendKind::Process,
                process.doctor().await,
            ));
            built.push(Arc::new(process));
        }
        Err(err) => checks.push(
            DoctorCheck::missing(
                "process backend",
                err.to_string(),
                "fix the [process] settings the message names",
            )
            .on("process"),
        ),
    }
    match backends::docker(settings) {
        Ok(docker) => {
            checks.extend(report::from_backend(
                BackendKind::Docker,
                docker.doctor().await,
            ));
            built.push(Arc::new(docker));
        }
        Err(err) => checks.push(
            DoctorCheck::missing(
                "docker backend",
                err.to_string(),
                "fix the [docker] settings",
            )
            .on("docker"),
        ),
    }
    if settings.kubernetes_wanted() {
        match backends::kubernetes(settings) {
            Ok(kube) => {
                checks.extend(report::from_backend(
                    BackendKind::Kubernetes,
                    kube.doctor().await,
                ));
                built.push(Arc::new(kube));
            }
            Err(err) => checks.push(
                DoctorCheck::missing(
                    "kubernetes backend",
                    err.to_string(),
                    "fix the [kubernetes] settings",
                )
                .on("kubernetes"),
            ),
        }
    }
    checks.extend(features(&built).await);
    checks.extend(versions(&built).await);
    checks.push(makers(&super::ls::list_all(settings).await));
    checks.push(running::master_switch(settings).await);
    checks.extend(running::pools(settings).await);
    checks.extend(running::sources(settings).await);
    checks.push(experiments(settings));
    checks.push(logs(settings));
    report::weigh_backends(settings, &mut checks);
    checks
}

/// Where each log is: the daemon's (its stderr), and each backend's instances'.
fn logs(settings: &Settings) -> DoctorCheck {
    DoctorCheck::ok(
        "logs",
        format!(
            "the daemon logs to its stderr: the terminal of `sandboxd serve` (or \
             `./scripts/run.sh`), or wherever its service manager sends stderr (systemd: \
             `journalctl -u <unit>`); `-v`/`-vv` before `serve` log more. Instances: process \
             backend {}/sandboxd-<engine>-<owner>/server.log; docker backend `docker logs \
             <name>`; kubernetes `kubectl -n {} logs <name>` (names: `sandboxd ls`)",
            settings.process.root.display(),
            settings.kubernetes.namespace
        ),
    )
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
            // Features a backend lacks are only not offered: optional lines.
            let kind = backend.kind();
            let check = match probe {
                Ok(probe) => feature_check(subject, &probe),
                Err(err) => DoctorCheck::unavailable(
                    subject,
                    format!("the probe failed: {err}"),
                    format!(
                        "see it fail in full with `sandboxd -v provision --owner probe \
                         --engines {} --backend {kind}` (then `sandboxd teardown --owner probe`)",
                        engine.name
                    ),
                ),
            };
            Some(check.on(kind.as_str()))
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
    DoctorCheck::unavailable(
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
        print!("{}", report::render(&checks, report::width()));
    }
    if checks.iter().any(|c| !c.ok && c.required) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
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
