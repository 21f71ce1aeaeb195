//! Instances a backend makes for its own use, through the trait, beside it: a warm-pool
//! member held with its superuser connection, its account made and proven while it idles and
//! handed out, and the throwaway instance a feature probe activates each feature on
//! (`Backend::probe_features_at`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sandboxd_domain::instance::Instance;
use sandboxd_domain::{AgentSlug, Credentials, DaemonId, EngineRef};
use secrecy::ExposeSecret;
use tracing::Instrument;

use crate::backend::Backend;
use crate::error::{BackendError, wire_error};
use crate::handle::{InstanceHandle, InstanceRequest};
use crate::idle::{IdleMember, PROOF_MAX_AGE, Proof, REPROVE_AFTER};
use crate::probe::{self, FeatureProbe};
use crate::wire::{self, AdminSession, Reach, WireError};

/// What `backend` provides of `engine`'s allowlist at major version `major` (None: its own),
/// found on a throwaway instance owned by `slot` and made by `maker`, torn down before this
/// returns.
pub(crate) async fn probe_on_throwaway<B: Backend + ?Sized>(
    backend: &B,
    engine: EngineRef,
    major: Option<u32>,
    slot: &AgentSlug,
    maker: &DaemonId,
) -> Result<FeatureProbe, BackendError> {
    let image = match major {
        None => backend.image_of(engine).await?,
        Some(major) => backend.image_of_major(engine, major).await?,
    };
    let source = match image {
        Some(image) => format!("image {image}"),
        None => backend.feature_location(engine),
    };
    let mut probe = FeatureProbe {
        engine: engine.name,
        source,
        available: BTreeSet::new(),
        missing: BTreeMap::new(),
        versions: BTreeMap::new(),
    };
    if engine.features.is_empty() {
        return Ok(probe);
    }
    let member = backend
        .provision_idle(&InstanceRequest {
            major,
            engine,
            owner: slot.clone(),
            maker: maker.clone(),
            features: BTreeSet::new(),
            size: None,
        })
        .await?;
    let instance = &member.instance;
    let outcome = async {
        let (host, port) = backend.admin_address(instance).await?;
        let reach = Reach { host: &host, port };
        probe::try_each_feature(&mut probe, engine, instance, reach).await
    }
    .await;
    let handle = InstanceHandle::of(instance);
    drop(member);
    if let Err(err) = backend.teardown(&handle).await {
        tracing::warn!(instance = %handle.name, error = %err, "removing a feature probe's instance");
    }
    outcome.map(|()| probe)
}

/// Here rather than in `idle.rs`: holding a member needs the backend that made it, and the
/// trait's `hand_out` consumes one, so `idle.rs` stays below the trait.
impl IdleMember {
    /// Holds a superuser connection to `instance`, just provisioned for a pool, on `backend`;
    /// tears it down when that fails.
    pub(crate) async fn hold(
        backend: &(impl Backend + ?Sized),
        instance: Instance,
    ) -> Result<Self, BackendError> {
        let held = async {
            let (host, port) = backend.admin_address(&instance).await?;
            let reach = Reach { host: &host, port };
            let session =
                AdminSession::open(instance.engine, &instance.admin, reach, &instance.database)
                    .await
                    .map_err(wire_error(&instance, "holding a superuser connection to"))?;
            let facts = session
                .facts()
                .await
                .map_err(wire_error(&instance, "asking the server facts of"))?;
            Ok((session, facts))
        }
        .await;
        match held {
            Ok((session, facts)) => {
                let agent = Credentials::generate(instance.engine.agent_user);
                let mint = instance.engine.mint(&agent, facts, &instance.database);
                Ok(Self {
                    instance,
                    session,
                    agent,
                    mint,
                    proof: None,
                })
            }
            Err(err) => {
                let _ = backend.teardown(&InstanceHandle::of(&instance)).await;
                Err(err)
            }
        }
    }
}

impl IdleMember {
    /// Makes the handed-out account now, while the member idles, and proves it with its own
    /// login, so that its hand-out is one round trip on the held connection ([`hand_out`]).
    /// Where the session holds no connection (MySQL, MongoDB) nothing changes: the hand-out
    /// mints and proves. Tears the member down when it fails.
    pub async fn ready(mut self, backend: &(impl Backend + ?Sized)) -> Result<Self, BackendError> {
        if !self.session.holds_connection() {
            return Ok(self);
        }
        let span = tracing::info_span!("ready", engine = %self.instance.engine);
        let made = async {
            let steps = std::mem::take(&mut self.mint);
            self.session.run(&steps).await.map_err(wire_error(
                &self.instance,
                "minting the handed-out account of",
            ))?;
            self.prove(backend).await
        }
        .instrument(span)
        .await;
        match made {
            Ok(()) => Ok(self),
            Err(err) => {
                let handle = self.handle();
                drop(self);
                let _ = backend.teardown(&handle).await;
                Err(err)
            }
        }
    }

    /// A new login as the account, on the address the agent will get, between two reads of
    /// the account over the held connection that must agree: the proof is of the account as
    /// it is now.
    async fn prove(&mut self, backend: &(impl Backend + ?Sized)) -> Result<(), BackendError> {
        let before = self.account_state().await?;
        let (host, port) = backend.admin_address(&self.instance).await?;
        let reach = Reach { host: &host, port };
        let engine = self.instance.engine;
        wire::probe(engine.get(), reach, &self.agent, &self.instance.database)
            .await
            .map_err(wire_error(
                &self.instance,
                "proving the handed-out account of",
            ))?;
        let after = self.account_state().await?;
        if before.expose_secret() != after.expose_secret() {
            return Err(changed(&self.instance));
        }
        self.proof = Some(Proof {
            at: Instant::now(),
            account: after,
        });
        Ok(())
    }

    async fn account_state(&mut self) -> Result<secrecy::SecretString, BackendError> {
        account_state(&mut self.session, &self.agent.user, &self.instance).await
    }

    /// The account is as it was proven, read over the held connection: a reply also means the
    /// server was not restarted since the proof (a restart ends the connection).
    async fn recheck(&mut self) -> Result<(), BackendError> {
        match &self.proof {
            Some(proof) => {
                recheck(&mut self.session, &self.agent.user, proof, &self.instance).await
            }
            None => self.check().await,
        }
    }

    /// A pool's health check: one round trip over the held connection, which for a ready
    /// member reads its account and compares it with the proof; a proof older than
    /// [`REPROVE_AFTER`] is made again by a new login.
    pub async fn check_on(
        &mut self,
        backend: &(impl Backend + ?Sized),
    ) -> Result<(), BackendError> {
        match self.proven_for() {
            None => self.check().await,
            Some(age) if age > REPROVE_AFTER => {
                self.recheck().await?;
                self.prove(backend).await
            }
            Some(_) => self.recheck().await,
        }
    }

    async fn check(&mut self) -> Result<(), BackendError> {
        self.session
            .check()
            .await
            .map_err(wire_error(&self.instance, "checking"))
    }
}

async fn account_state(
    session: &mut AdminSession,
    user: &str,
    instance: &Instance,
) -> Result<secrecy::SecretString, BackendError> {
    match session.account_state(user).await {
        Ok(Some(state)) => Ok(state),
        Ok(None) => Err(WireError(
            "no connection is held to read the account".into(),
        )),
        Err(err) => Err(err),
    }
    .map_err(wire_error(instance, "reading the handed-out account of"))
}

async fn recheck(
    session: &mut AdminSession,
    user: &str,
    proof: &Proof,
    instance: &Instance,
) -> Result<(), BackendError> {
    let now = account_state(session, user, instance).await?;
    if now.expose_secret() != proof.account.expose_secret() {
        return Err(changed(instance));
    }
    Ok(())
}

fn changed(instance: &Instance) -> BackendError {
    wire_error(instance, "re-checking the handed-out account of")(WireError(
        "the account is not as it was when it was proven".into(),
    ))
}

/// [`Backend::hand_out`]: a ready member costs one round trip on the held connection (its
/// account re-checked) beside recording the owner; one whose proof is older than
/// [`PROOF_MAX_AGE`], or that was never readied, also logs in as the account again (and mints
/// it first when it does not exist yet). On failure the member is torn down.
pub(crate) async fn hand_out<B: Backend + ?Sized>(
    backend: &B,
    member: IdleMember,
    owner: &AgentSlug,
) -> Result<Instance, BackendError> {
    let needs_login = member.proven_for().is_none_or(|age| age > PROOF_MAX_AGE);
    let IdleMember {
        mut instance,
        mut session,
        agent,
        mint: steps,
        proof,
    } = member;
    let engine = instance.engine;
    let readied = async {
        match &proof {
            Some(proof) => {
                recheck(&mut session, &agent.user, proof, &instance)
                    .instrument(tracing::info_span!("recheck", %engine))
                    .await
            }
            None => session
                .run(&steps)
                .instrument(tracing::info_span!("mint", %engine))
                .await
                .map_err(wire_error(&instance, "minting the handed-out account")),
        }
    };
    // Spans of their own: these are the hand-out's round trips, the time a warm
    // `request_sandbox` spends outside the daemon. They name the engine, never a secret.
    let (readied, recorded) = tokio::join!(
        readied,
        backend
            .record_owner(&instance, owner)
            .instrument(tracing::info_span!("record_owner", %engine)),
    );
    drop(session);
    if let Ok(name) = &recorded {
        // On an operator's network agents reach a container by its name.
        if instance.host == instance.name {
            instance.host = name.clone();
        }
        instance.name = name.clone();
        instance.owner = owner.clone();
    }
    instance.agent = agent;
    let outcome = async {
        readied?;
        recorded?;
        if !needs_login {
            return Ok(());
        }
        let (host, port) = backend.admin_address(&instance).await?;
        let reach = Reach { host: &host, port };
        wire::probe(engine.get(), reach, &instance.agent, &instance.database)
            .instrument(tracing::info_span!("prove", %engine))
            .await
            .map_err(wire_error(&instance, "proving the handed-out account"))
    }
    .await;
    if let Err(err) = outcome {
        if let Err(teardown) = backend.teardown(&InstanceHandle::of(&instance)).await {
            tracing::warn!(instance = %instance.name, error = %teardown, "removing a pool member that failed its hand-out");
        }
        return Err(err);
    }
    Ok(instance)
}
