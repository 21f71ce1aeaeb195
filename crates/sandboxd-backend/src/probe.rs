//! Which of an engine's allowlisted features a backend really provides: each one activated on a
//! throwaway instance, as a sandbox's would be. The allowlist says what may be asked for; the
//! image (or the host's packages) says what exists.

use std::collections::{BTreeMap, BTreeSet};

use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Feature};
use serde::Serialize;

use crate::backend::{Backend, InstanceHandle, InstanceRequest};
use crate::error::BackendError;
use crate::wire::{self, ActivationError, Reach};

/// What one backend provides of one engine's allowlist.
#[derive(Debug, Clone, Serialize)]
pub struct FeatureProbe {
    pub engine: &'static str,
    /// Where the features come from: the image, or the host's installation.
    pub source: String,
    pub available: BTreeSet<Feature>,
    /// Each feature it lacks: the server's reason and what provides it.
    pub missing: BTreeMap<&'static str, String>,
}

impl FeatureProbe {
    pub fn provides(&self, feature: Feature) -> bool {
        self.available.contains(&feature)
    }

    /// The available features' names, in the allowlist's order.
    pub fn names(&self) -> Vec<&'static str> {
        self.available.iter().map(|f| f.name()).collect()
    }
}

/// Starts an idle instance of `engine` owned by `slot` (a pool slot: never an agent's, hidden
/// from the sandboxes view), activates each allowlisted feature on it in turn, and tears it
/// down. A feature the server lacks is recorded with why; any other failure fails the probe.
pub async fn features(
    backend: &(impl Backend + ?Sized),
    engine: EngineRef,
    slot: &AgentSlug,
    maker: &DaemonId,
) -> Result<FeatureProbe, BackendError> {
    let source = match backend.image_of(engine).await? {
        Some(image) => format!("image {image}"),
        None => backend.feature_location(engine),
    };
    let mut probe = FeatureProbe {
        engine: engine.name,
        source,
        available: BTreeSet::new(),
        missing: BTreeMap::new(),
    };
    if engine.features.is_empty() {
        return Ok(probe);
    }
    let member = backend
        .provision_idle(&InstanceRequest {
            major: None,
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
        let major = wire::server_facts(engine.get(), &instance.admin, reach)
            .await
            .ok()
            .and_then(|facts| facts.major_version);
        for spec in engine.features {
            let feature = Feature::parse(engine, spec.name)
                .expect("a name from the engine's own allowlist parses");
            let one = BTreeSet::from([feature]);
            match wire::activate(
                engine.get(),
                &instance.admin,
                reach,
                &instance.database,
                &one,
            )
            .await
            {
                Ok(()) => {
                    probe.available.insert(feature);
                }
                Err((_, ActivationError::Missing(detail))) => {
                    probe.missing.insert(
                        spec.name,
                        format!(
                            "{detail}; it comes with {}",
                            spec.activation.package_hint(major)
                        ),
                    );
                }
                Err((_, ActivationError::Wire(err))) => {
                    return Err(BackendError::Wire {
                        operation: "probing a feature",
                        name: format!("{} ({})", instance.name, spec.name),
                        detail: err.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
    .await;
    let handle = InstanceHandle::of(instance);
    drop(member);
    if let Err(err) = backend.teardown(&handle).await {
        tracing::warn!(instance = %handle.name, error = %err, "removing a feature probe's instance");
    }
    outcome.map(|()| probe)
}
