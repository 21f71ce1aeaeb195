//! Instances a backend makes for its own use, through the trait, beside it: a warm-pool
//! member held with its superuser connection, and the throwaway instance a feature probe
//! activates each feature on (`Backend::probe_features_at`).

use std::collections::{BTreeMap, BTreeSet};

use sandboxd_domain::instance::Instance;
use sandboxd_domain::{AgentSlug, Credentials, DaemonId, EngineRef};

use crate::backend::Backend;
use crate::error::{BackendError, wire_error};
use crate::handle::{InstanceHandle, InstanceRequest};
use crate::idle::IdleMember;
use crate::probe::{self, FeatureProbe};
use crate::wire::{AdminSession, Reach};

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
                })
            }
            Err(err) => {
                let _ = backend.teardown(&InstanceHandle::of(&instance)).await;
                Err(err)
            }
        }
    }
}
