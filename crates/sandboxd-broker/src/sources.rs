//! Clone sources (SPEC §7), the operator's side: registering a production Postgres (its DSN
//! sealed by the store, never shown back), taking snapshots of it (on demand, and on each
//! source's refresh interval from the janitor's tick), and removing it once no project clones
//! it. Cloning itself is `sandbox.rs`'s: a snapshot from the store, never the source.

use std::time::Instant;

use sandboxd_backend::clone::{SourceTls, check_dsn, describe_tls, take_snapshot};
use sandboxd_domain::ProjectSlug;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::clone::{CloneChoice, Privacy};
use sandboxd_domain::engine::Protocol;
use sandboxd_domain::envelope::ErrorCode;
use sandboxd_domain::error::allowed_list;
use sandboxd_domain::{Actor, Project, Source};
use sandboxd_domain::{BackendKind, EngineRef, InputError, SourceName, engines};
use secrecy::SecretString;

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::{BrokerError, not_opted_in};

/// The engine a source's clones run: the registry's Postgres-protocol engine.
pub(crate) fn clone_engine() -> Option<EngineRef> {
    engines::all().find(|e| e.protocol == Protocol::Postgres)
}

/// Whether `engine` can be handed out as a clone.
pub fn clonable(engine: EngineRef) -> bool {
    clone_engine() == Some(engine)
}

/// The engines that can be clones, for an error naming what is allowed.
pub(crate) fn clonable_list() -> String {
    allowed_list(engines::all().filter(|e| clonable(*e)).map(|e| e.name))
}

impl Broker {
    /// Registers `name` (or replaces its DSN and settings; its snapshot goes with the old DSN).
    /// The DSN's syntax and TLS keys are checked and a CA file it names is read; nothing
    /// connects to it until a snapshot is taken. A DSN whose TLS protects nothing on the
    /// network is kept, with a warning ([`Broker::source_tls`] shows it).
    pub async fn put_source(
        &self,
        name: &SourceName,
        dsn: &SecretString,
        privacy: Privacy,
        refresh_secs: u64,
    ) -> Result<Source, BrokerError> {
        let started = Instant::now();
        let tls = check_dsn(dsn).map_err(|why| InputError::Malformed {
            what: "dsn",
            detail: why.to_string(),
        })?;
        if let Some(warning) = tls.warning() {
            tracing::warn!(source = %name, "{warning}");
        }
        let source = self
            .store()
            .put_source(name, dsn, privacy, refresh_secs)
            .await?;
        // Its snapshot went with the old DSN: so do the pooled clones made from it.
        self.inner.pools.offer_snapshot(name, None);
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::PutSource,
            subject: name.as_str(),
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!(
                "privacy {}; refresh {refresh_secs}s; tls {}{}",
                privacy.as_str(),
                tls.mode,
                if tls.warning().is_some() {
                    " (unverified off loopback)"
                } else {
                    ""
                }
            ),
        })
        .await;
        Ok(source)
    }

    pub async fn sources(&self) -> Result<Vec<Source>, BrokerError> {
        Ok(self.store().list_sources().await?)
    }

    /// How source `name` is reached over TLS (its mode, what it trusts, a warning when that
    /// protects nothing on the network), read from its sealed DSN, of which nothing else is
    /// shown. None when there is no such source.
    pub async fn source_tls(&self, name: &SourceName) -> Result<Option<SourceTls>, BrokerError> {
        let Some(dsn) = self.store().source_dsn(name).await? else {
            return Ok(None);
        };
        describe_tls(&dsn)
            .map(Some)
            .map_err(|err| BrokerError::Source(err.to_string()))
    }

    pub async fn source(&self, name: &SourceName) -> Result<Option<Source>, BrokerError> {
        Ok(self.store().get_source(name).await?)
    }

    /// Removes the source and its snapshot; refused while a project clones it. `false` when
    /// there was none.
    pub async fn remove_source(&self, name: &SourceName) -> Result<bool, BrokerError> {
        let started = Instant::now();
        let users: Vec<String> = self
            .store()
            .list_projects()
            .await?
            .into_iter()
            .filter(|p| p.sandbox_clones.iter().any(|(_, c)| &c.source == name))
            .map(|p| p.slug.to_string())
            .collect();
        if !users.is_empty() {
            return Err(BrokerError::InUse {
                what: "source",
                id: name.to_string(),
                detail: format!(
                    "project(s) {} clone it; set their clones elsewhere first \
                     (`sandboxd projects set … --no-clones`)",
                    users.join(", ")
                ),
            });
        }
        let removed = self.store().delete_source(name).await?;
        self.inner.pools.offer_snapshot(name, None);
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::RemoveSource,
            subject: name.as_str(),
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: if removed { "removed" } else { "there was none" }.to_owned(),
        })
        .await;
        Ok(removed)
    }

    /// Takes a snapshot of `name` now and stores it as its latest. A failure is recorded on
    /// the source (the snapshot before it stays) and returned; neither quotes the DSN.
    pub async fn snapshot_source(
        &self,
        name: &SourceName,
        actor: Actor,
    ) -> Result<Source, BrokerError> {
        let started = Instant::now();
        let store = self.store();
        let source = store
            .get_source(name)
            .await?
            .ok_or_else(|| BrokerError::NotFound {
                what: "source",
                id: name.to_string(),
            })?;
        let dsn = store
            .source_dsn(name)
            .await?
            .ok_or_else(|| BrokerError::NotFound {
                what: "source",
                id: name.to_string(),
            })?;
        let engine = clone_engine().ok_or_else(|| {
            BrokerError::Source("no engine of this sandboxd speaks PostgreSQL".into())
        })?;
        // pg_dump runs in a container of the source's major version: Docker's, wherever the
        // sandboxes themselves run.
        let backends = &self.inner.backends;
        let backend = backends
            .for_kind(BackendKind::Docker)
            .unwrap_or_else(|| backends.primary());
        let taken = take_snapshot(
            backend.as_ref(),
            engine,
            name.as_str(),
            &dsn,
            source.privacy,
        )
        .await
        .map_err(|e| e.to_string());
        let took_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let outcome = match taken {
            Ok(snapshot) => match store.put_snapshot(name, &snapshot, took_ms).await {
                Ok(()) => {
                    let version = snapshot.server_version.clone();
                    self.inner
                        .pools
                        .offer_snapshot(name, Some(std::sync::Arc::new(snapshot)));
                    Ok(version)
                }
                Err(err) => Err(BrokerError::from(err)),
            },
            Err(why) => {
                if let Err(err) = store.snapshot_failed(name, &why).await {
                    tracing::warn!(source = %name, error = %err, "recording a failed snapshot");
                }
                Err(BrokerError::Source(why))
            }
        };
        self.inner
            .metrics
            .snapshot(outcome.is_ok(), started.elapsed());
        self.audit(AuditRecord {
            actor,
            action: AuditAction::Snapshot,
            subject: name.as_str(),
            project: None,
            outcome: Outcome::of(&outcome, ErrorCode::ProvisionerUnavailable),
            started,
            detail: match &outcome {
                Ok(version) => format!("{version} in {took_ms} ms"),
                Err(err) => err.to_string(),
            },
        })
        .await;
        outcome?;
        store
            .get_source(name)
            .await?
            .ok_or_else(|| BrokerError::NotFound {
                what: "source",
                id: name.to_string(),
            })
    }

    /// Snapshots every source whose refresh interval has passed since its last attempt (one at
    /// a time: a snapshot is a few seconds of the source's time, not worth racing). Returns
    /// how many were attempted.
    pub async fn refresh_sources(&self) -> usize {
        let sources = match self.store().list_sources().await {
            Ok(sources) => sources,
            Err(err) => {
                tracing::warn!(error = %err, "listing sources to refresh");
                return 0;
            }
        };
        let now = now_ms();
        let mut attempted = 0;
        for source in sources.iter().filter(|s| s.refresh_secs > 0) {
            let last = source
                .last_attempt_at_ms
                .or(source.snapshot.as_ref().map(|s| s.taken_at_ms))
                .unwrap_or(0);
            let due = i64::try_from(source.refresh_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
            if now.saturating_sub(last) < due {
                continue;
            }
            attempted += 1;
            if let Err(err) = self.snapshot_source(&source.name, Actor::Daemon).await {
                tracing::warn!(source = %source.name, error = %err, "refreshing a snapshot");
            }
        }
        attempted
    }

    /// Sets which of a project's engines are handed out as clones of which source, under which
    /// privacy mode (empty: none). Each engine must be clonable and opted in, each source
    /// registered, and a mode that keeps values only asked of a source that keeps them.
    pub async fn set_project_clones(
        &self,
        slug: &ProjectSlug,
        clones: Vec<(EngineRef, CloneChoice)>,
    ) -> Result<Project, BrokerError> {
        let started = Instant::now();
        let project = self.existing_project(slug).await?;
        let services = project.sandbox_services.unwrap_or_default();
        self.check_clones(&services, &clones).await?;
        let project = self.store().set_project_clones(slug, &clones).await?;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetProject,
            subject: slug.as_str(),
            project: Some(slug),
            outcome: Outcome::Ok,
            started,
            detail: format!(
                "clones {}",
                if clones.is_empty() {
                    "none".to_owned()
                } else {
                    clones
                        .iter()
                        .map(|(e, s)| format!("{e}={s}"))
                        .collect::<Vec<_>>()
                        .join(",")
                }
            ),
        })
        .await;
        Ok(project)
    }

    /// Refreshes due snapshots every `janitor_interval` until `shutdown` is cancelled: a task
    /// of its own, so a slow source never holds up the janitor.
    pub fn spawn_source_refresher(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let broker = self.clone();
        let period = self.inner.config.janitor_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = ticker.tick() => {
                        // Replicas: one takes the snapshots.
                        let term = crate::replicas::Replication::alive_within(period);
                        if broker.leads("sources", term).await {
                            broker.refresh_sources().await;
                        }
                    }
                }
            }
        })
    }

    /// Checks a clone list against the services a project is about to opt into, so a caller
    /// setting both can refuse before storing either.
    pub async fn check_project_clones(
        &self,
        services: &[EngineRef],
        clones: &[(EngineRef, CloneChoice)],
    ) -> Result<(), BrokerError> {
        self.check_clones(services, clones).await
    }

    /// Checks a project's clone list: each engine clonable and opted in, each source known,
    /// and values kept only from a source that keeps them.
    async fn check_clones(
        &self,
        services: &[EngineRef],
        clones: &[(EngineRef, CloneChoice)],
    ) -> Result<(), BrokerError> {
        for (engine, choice) in clones {
            let source = &choice.source;
            if !clonable(*engine) {
                return Err(InputError::Malformed {
                    what: "sandbox_clones",
                    detail: format!("{engine} cannot be a clone; clonable: {}", clonable_list()),
                }
                .into());
            }
            if !services.contains(engine) {
                return Err(not_opted_in(
                    "sandbox_clones",
                    "a clone for",
                    *engine,
                    services,
                ));
            }
            let Some(registered) = self.store().get_source(source).await? else {
                let known: Vec<String> = self
                    .store()
                    .list_sources()
                    .await?
                    .into_iter()
                    .map(|s| s.name.to_string())
                    .collect();
                return Err(InputError::Malformed {
                    what: "sandbox_clones",
                    detail: format!(
                        "no source {source}; registered: {}",
                        allowed_list(known.iter().map(String::as_str))
                    ),
                }
                .into());
            };
            if choice.privacy == Some(Privacy::KeepValues)
                && registered.privacy == Privacy::NoValues
            {
                return Err(InputError::Malformed {
                    what: "sandbox_clones",
                    detail: format!(
                        "source {source} is registered no-values: its snapshots hold no sample \
                         values, so its clones cannot keep them; choose {source} or \
                         {source}:no-values, or register the source with --privacy keep-values"
                    ),
                }
                .into());
            }
        }
        Ok(())
    }
}
