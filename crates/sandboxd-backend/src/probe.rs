//! Which of an engine's allowlisted features a backend really provides: each one activated on a
//! throwaway instance, as a sandbox's would be. The allowlist says what may be asked for; the
//! image (or the host's packages) says what exists. The throwaway instance comes and goes in
//! `Backend::probe_features`; here is what a probe finds and how each feature is tried.

use std::collections::{BTreeMap, BTreeSet};

use sandboxd_domain::instance::Instance;
use sandboxd_domain::{EngineRef, Feature};
use serde::Serialize;

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
    /// The version of each available feature the server reports (Redis modules: `MODULE
    /// LIST`'s `ver`, 21005 as "2.10.5"), by feature name.
    pub versions: BTreeMap<&'static str, String>,
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

/// Activates each of `engine`'s allowlisted features in turn on `instance` (a throwaway one
/// [`Backend::probe_features`](crate::Backend::probe_features) started for this), reached at
/// `reach`, and records each in `probe`. A feature the server lacks is recorded with why; any
/// other failure fails the probe.
pub(crate) async fn try_each_feature(
    probe: &mut FeatureProbe,
    engine: EngineRef,
    instance: &Instance,
    reach: Reach<'_>,
) -> Result<(), BackendError> {
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
    probe.versions = wire::feature_versions(engine.get(), &instance.admin, reach)
        .await
        .map_err(|err| BackendError::Wire {
            operation: "reading feature versions",
            name: instance.name.clone(),
            detail: err.to_string(),
        })?;
    Ok(())
}
