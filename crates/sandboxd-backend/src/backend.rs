//! The `Backend` trait: what every way of running instances (containers, processes) offers the
//! broker and the CLI. Its provided methods are the same on every backend, built on the
//! required ones: a pool member's hand-out, a feature probe's throwaway instance, activation,
//! the agent's queries and connection, a reset. What they take and give lives below it
//! (`handle.rs`, `doctor.rs`, `idle.rs`, `probe.rs`); `clone::apply` reaches a backend only
//! through its port, `CloneHost`, implemented here for every backend.

use std::collections::BTreeSet;
use std::fmt;

use async_trait::async_trait;
use sandboxd_domain::instance::{BackendKind, Instance};
use sandboxd_domain::{AgentSlug, DaemonId, DataSize, EngineRef, Feature};

use crate::clone;
use crate::doctor::DoctorCheck;
use crate::error::{BackendError, wire_error};
use crate::handle::{InstanceHandle, InstanceRequest, ListedInstance};
use crate::idle::IdleMember;
use crate::probe::FeatureProbe;
use crate::wire::{
    self, ActivationError, AgentConnection, AgentStatement, QueryAnswer, QueryLimits, Reach,
};

/// How eagerly [`Backend::sweep`] removes what is unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// The janitor's pass: only what has been unused past the backend's settle time.
    Settled,
    /// Everything unused now: the maker is stopping, or an operator tore its instances down.
    Now,
}

#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    fn kind(&self) -> BackendKind;

    /// The data space an instance gets when its request names no size. The memory cap is set
    /// for it and grows with a bigger one ([`sandboxd_domain::space::memory_cap_mb`]). No
    /// default: a backend that wraps another must say the other's.
    fn default_size(&self) -> DataSize;

    /// Succeeds when the backend can be used right now (the container engine answers).
    async fn ping(&self) -> Result<(), BackendError>;

    /// Succeeds when this backend can run `engine` (binaries installed, image present).
    async fn supports(&self, engine: EngineRef) -> Result<(), BackendError>;

    /// Starts one instance, waits until its handed-out account answers an authenticated round
    /// trip, and activates the requested features. On failure nothing of it is left behind.
    async fn provision(&self, request: &InstanceRequest) -> Result<Instance, BackendError>;

    /// True when the instance is running (and, for containers, not OOM-killed).
    async fn is_live(&self, handle: &InstanceHandle) -> Result<bool, BackendError>;

    /// Stops and removes the instance. Idempotent: an instance already gone is fine.
    async fn teardown(&self, handle: &InstanceHandle) -> Result<(), BackendError>;

    /// Every instance this backend created, found by label or metadata.
    async fn list(&self) -> Result<Vec<ListedInstance>, BackendError>;

    /// Removes what `maker`'s instances shared and no instance uses any more (the Docker
    /// backend's daemon network). `Sweep::Settled` leaves what was made recently (a provision
    /// may be about to use it); `Sweep::Now` does not wait. Returns how many things it removed;
    /// never touches another maker's.
    async fn sweep(&self, _maker: &DaemonId, _when: Sweep) -> Result<usize, BackendError> {
        Ok(0)
    }

    async fn doctor(&self) -> Vec<DoctorCheck>;

    /// Starts a warm-pool member: `request.owner` is a pool slot
    /// ([`AgentSlug::pool_slot`]); the server is proven ready as superuser, prepared
    /// (`EngineRecipes::pool_prepare`) and its features active, but no handed-out account
    /// exists until [`Backend::hand_out`]. On failure nothing of it is left behind.
    async fn provision_idle(&self, request: &InstanceRequest) -> Result<IdleMember, BackendError>;

    /// Records that `instance` now belongs to `owner` where `list` (and so the janitor and a
    /// restarted daemon) reads it; returns the name the instance goes by from now on.
    async fn record_owner(
        &self,
        instance: &Instance,
        owner: &AgentSlug,
    ) -> Result<String, BackendError>;

    /// Hands a pool member to `owner`: re-checks its account over the held superuser
    /// connection (a member made ready while idle, [`IdleMember::ready`]) or mints and proves
    /// it, while the owner is recorded. After it the instance is as `provision` would have made
    /// it for `owner`. On failure the member is torn down: it is never handed out twice, nor
    /// half.
    async fn hand_out(
        &self,
        member: IdleMember,
        owner: &AgentSlug,
    ) -> Result<Instance, BackendError> {
        crate::members::hand_out(self, member, owner).await
    }

    /// The image that runs `engine` on this backend now (the first of its candidates present),
    /// or None for a backend without images.
    async fn image_of(&self, engine: EngineRef) -> Result<Option<String>, BackendError> {
        let _ = engine;
        Ok(None)
    }

    /// The version of the `engine` server this backend runs (`15.14`), as the server program
    /// or the image says it without starting anything; None when it cannot tell. `doctor`
    /// compares the backends' versions with it.
    async fn offered_version(&self, engine: EngineRef) -> Option<String> {
        let _ = engine;
        None
    }

    /// Where features of `engine` come from, for "not available in …" errors: the image, or
    /// this host's packages.
    fn feature_location(&self, engine: EngineRef) -> String;

    /// What runs `engine` here, as an identity that changes when what the backend runs does
    /// (an image rebuilt under its tag, a server program or host package installed): what a
    /// cached [`FeatureProbe`] is keyed by.
    async fn provider(&self, engine: EngineRef) -> Result<String, BackendError>;

    /// [`provider`](Self::provider) of `engine` at major version `major`, which a clone runs
    /// (its source's). A backend that runs only its own version has none.
    async fn provider_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<String, BackendError> {
        Err(BackendError::Unsupported {
            operation: "running a given major version",
            detail: format!(
                "the {} backend runs its own {} only, not major version {major}",
                self.kind(),
                engine.name
            ),
        })
    }

    /// [`image_of`](Self::image_of) `engine` at major version `major`; None for a backend
    /// without images.
    async fn image_of_major(
        &self,
        engine: EngineRef,
        major: u32,
    ) -> Result<Option<String>, BackendError> {
        let _ = (engine, major);
        Ok(None)
    }

    /// Which of `engine`'s allowlisted features this backend really provides, found on a
    /// throwaway instance owned by `slot` (a pool slot) and made by `maker`; it is torn down
    /// before this returns.
    async fn probe_features(
        &self,
        engine: EngineRef,
        slot: &AgentSlug,
        maker: &DaemonId,
    ) -> Result<FeatureProbe, BackendError> {
        self.probe_features_at(engine, None, slot, maker).await
    }

    /// [`probe_features`](Self::probe_features) on a server of major version `major` (None:
    /// the backend's own): what a clone of a source of that version is offered.
    async fn probe_features_at(
        &self,
        engine: EngineRef,
        major: Option<u32>,
        slot: &AgentSlug,
        maker: &DaemonId,
    ) -> Result<FeatureProbe, BackendError> {
        crate::members::probe_on_throwaway(self, engine, major, slot, maker).await
    }

    /// Where sandboxd itself dials the instance as its superuser: the handed-out address,
    /// unless the backend knows one that works from where sandboxd runs (a container's address
    /// on its network, when the handed-out host is a name only that network resolves).
    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError> {
        Ok((instance.host.clone(), instance.port))
    }

    /// Activates features on a running instance in place, as the service superuser, and records
    /// them on `instance`. Postgres makes them in `template1` as well, so every database the
    /// agent makes from then on has them (`wire::postgres::activate`).
    async fn activate(
        &self,
        instance: &mut Instance,
        features: &BTreeSet<Feature>,
    ) -> Result<(), BackendError> {
        let missing: BTreeSet<Feature> = features.difference(&instance.features).copied().collect();
        if missing.is_empty() {
            return Ok(());
        }
        let (host, port) = self.admin_address(instance).await?;
        let reach = Reach { host: &host, port };
        let result = wire::activate(
            instance.engine.get(),
            &instance.admin,
            reach,
            &instance.database,
            &missing,
        )
        .await;
        match result {
            Ok(()) => {
                instance.features.extend(missing);
                Ok(())
            }
            Err((feature, ActivationError::Missing(detail))) => {
                let major = wire::server_facts(instance.engine.get(), &instance.admin, reach)
                    .await
                    .ok()
                    .and_then(|f| f.major_version);
                Err(BackendError::FeatureUnavailable {
                    engine: instance.engine.name,
                    feature: feature.name(),
                    location: self.feature_location(instance.engine),
                    hint: format!(
                        "{detail}; it comes with {}",
                        feature.spec().activation.package_hint(major)
                    ),
                })
            }
            Err((feature, ActivationError::Wire(err))) => Err(BackendError::Wire {
                operation: "activating a feature",
                name: format!("{} ({})", instance.name, feature.name()),
                detail: err.to_string(),
            }),
        }
    }

    /// One statement (or Redis command) as the handed-out account (`sandbox_sql`), never the
    /// superuser, under `limits`.
    async fn query(
        &self,
        instance: &Instance,
        statement: &AgentStatement,
        limits: QueryLimits,
    ) -> Result<QueryAnswer, BackendError> {
        let (host, port) = self.admin_address(instance).await?;
        wire::agent_query(
            instance.engine.get(),
            Reach { host: &host, port },
            &instance.agent,
            &instance.database,
            statement,
            limits,
        )
        .await
        .map_err(wire_error(instance, "running a statement"))
    }

    /// A held connection as the handed-out account, never the superuser, whose statements the
    /// server cancels past `statement_timeout` (`run_experiment`'s `sql()`). Postgres only.
    async fn agent_connection(
        &self,
        instance: &Instance,
        application: &str,
        statement_timeout: std::time::Duration,
    ) -> Result<AgentConnection, BackendError> {
        if instance.engine.protocol != sandboxd_domain::Protocol::Postgres {
            return Err(BackendError::Wire {
                operation: "opening a connection",
                name: instance.name.to_string(),
                detail: format!("{} takes no held connection", instance.engine.name),
            });
        }
        let (host, port) = self.admin_address(instance).await?;
        AgentConnection::open(
            Reach { host: &host, port },
            &instance.agent,
            &instance.database,
            application,
            statement_timeout,
        )
        .await
        .map_err(wire_error(instance, "opening a connection"))
    }

    /// `pg_dump --schema-only --no-owner --no-privileges` of the source at `dsn`, by a
    /// `pg_dump` of PostgreSQL `major` (it must be at least the source's). The DSN is never
    /// logged nor quoted in an error.
    async fn dump_schema(
        &self,
        engine: EngineRef,
        major: u32,
        dsn: &secrecy::SecretString,
    ) -> Result<String, BackendError> {
        let _ = (engine, dsn);
        Err(BackendError::Unsupported {
            operation: "dumping a source's schema",
            detail: format!(
                "the {} backend has no pg_dump of PostgreSQL {major}; snapshots need the \
                 Docker backend",
                self.kind()
            ),
        })
    }

    /// Extends files of a running instance, named as its server sees them, to the given lengths
    /// (sparsely: a hole takes no space); a file already that long is left alone. By default
    /// the server's files are this host's (the process backend).
    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        let files = files.to_vec();
        let name = instance.name.clone();
        tokio::task::spawn_blocking(move || {
            for (path, length) in &files {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| BackendError::io("opening a relation file of", &name, e))?;
                let current = file
                    .metadata()
                    .map_err(|e| BackendError::io("measuring a relation file of", &name, e))?
                    .len();
                if current < *length {
                    file.set_len(*length)
                        .map_err(|e| BackendError::io("extending a relation file of", &name, e))?;
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| BackendError::Unsupported {
            operation: "extending relation files",
            detail: e.to_string(),
        })?
    }

    /// The server's full version, asked as the handed-out account.
    async fn server_version(&self, instance: &Instance) -> Result<String, BackendError> {
        let (host, port) = self.admin_address(instance).await?;
        wire::version(
            instance.engine.get(),
            Reach { host: &host, port },
            &instance.agent,
            &instance.database,
        )
        .await
        .map_err(wire_error(instance, "asking the version"))
    }

    /// Empties a live instance in place, as the service superuser (`reset_sandbox`): what the
    /// agent made is dropped and the instance is as `provision` left it, with the same
    /// endpoint and credentials and its features active again (Postgres: its database is a copy
    /// of `template1`, which kept them, and they are activated again in both); a clone
    /// (`snapshot`) is made a clone of it again. Where the agent has sessions of its own to lock
    /// out (Postgres), it is locked out from the first statement to the last, so nothing it does
    /// races the superuser's work; it is let in again whatever happened, its database present.
    /// A clone's database keeps its name; what making it a clone again did is the answer.
    async fn reset(
        &self,
        instance: &Instance,
        snapshot: Option<&sandboxd_domain::clone::Snapshot>,
    ) -> Result<Option<clone::CloneReport>, BackendError> {
        let (host, port) = self.admin_address(instance).await?;
        let reach = Reach { host: &host, port };
        let engine = instance.engine.get();
        let facts = wire::server_facts(engine, &instance.admin, reach)
            .await
            .map_err(wire_error(instance, "asking the server facts of"))?;
        let plan = engine.reset(&instance.agent, facts, &instance.database);
        let rebuilt = async {
            wire::reset(engine, &instance.admin, reach, &plan)
                .await
                .map_err(wire_error(instance, "resetting"))?;
            wire::activate(
                engine,
                &instance.admin,
                reach,
                &instance.database,
                &instance.features,
            )
            .await
            .map_err(|(feature, err)| {
                wire_error(instance, "activating a feature again after a reset")(format!(
                    "{}: {err}",
                    feature.name()
                ))
            })?;
            match snapshot {
                Some(snapshot) => {
                    let mut report = clone::apply(
                        self,
                        instance,
                        snapshot,
                        clone::Fidelity::FULL,
                        clone::SchemaOwner::Agent,
                    )
                    .await?;
                    report
                        .notes
                        .extend(clone::database_note(instance, snapshot));
                    Ok::<_, BackendError>(Some(report))
                }
                None => Ok(None),
            }
        }
        .await;
        let finished = wire::finish_reset(engine, &instance.admin, reach, &plan)
            .await
            .map_err(wire_error(
                instance,
                "letting the agent in again after a reset",
            ));
        // The rebuild's failure is the one to tell; the agent was let in again either way.
        let report = rebuilt?;
        finished?;
        Ok(report)
    }
}

/// Every backend is a place a clone can be made (`clone::apply`'s port).
#[async_trait]
impl<B: Backend + ?Sized> clone::CloneHost for B {
    async fn admin_address(&self, instance: &Instance) -> Result<(String, u16), BackendError> {
        Backend::admin_address(self, instance).await
    }

    async fn extend_files(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        Backend::extend_files(self, instance, files).await
    }
}
