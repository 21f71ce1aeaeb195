//! `[engines.<engine>]`, and each backend's configuration completed with it: the images and
//! readiness deadlines per engine that `[process]`, `[docker]` and `[kubernetes]` do not hold.

use std::collections::BTreeMap;
use std::time::Duration;

use sandboxd_backend::docker::DockerConfig;
use sandboxd_backend::duration_serde;
use sandboxd_backend::kube::KubeConfig;
use sandboxd_backend::process::ProcessConfig;
use sandboxd_domain::{EngineRef, engines};
use serde::{Deserialize, Serialize};

use super::{BackendChoice, Settings};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// The image to run for this engine on Docker. Unset: the engine's official image, else
    /// the locally built `sandboxd-local/…` one, whichever is present.
    pub image: Option<String>,
    /// Overrides the engine's readiness deadline.
    #[serde(rename = "readiness_deadline_secs", with = "duration_serde::opt_secs")]
    pub readiness_deadline: Option<Duration>,
}

impl Settings {
    /// The images that may run `engine` on Docker, in the order they are tried: the configured
    /// one alone, else the engine's list.
    pub fn images_for(&self, engine: EngineRef) -> Vec<String> {
        match self.engines.get(engine.name).and_then(|e| e.image.clone()) {
            Some(image) => vec![image],
            None => engine.images.iter().map(|i| (*i).to_owned()).collect(),
        }
    }

    /// The images of every engine, as the Docker and Kubernetes backends take them.
    fn images(&self) -> BTreeMap<String, Vec<String>> {
        engines::all()
            .map(|engine| (engine.name.to_owned(), self.images_for(engine)))
            .collect()
    }

    pub fn deadlines(&self) -> BTreeMap<String, Duration> {
        engines::all()
            .filter_map(|engine| {
                let deadline = self.engines.get(engine.name)?.readiness_deadline?;
                Some((engine.name.to_owned(), deadline))
            })
            .collect()
    }

    /// Whether the Kubernetes backend is wanted: it provisions, or it is enabled beside.
    pub fn kubernetes_wanted(&self) -> bool {
        self.backend == BackendChoice::Kubernetes || self.kubernetes.enabled
    }

    /// `[kubernetes]` with the per-engine images and deadlines.
    pub fn kube_config(&self) -> KubeConfig {
        KubeConfig {
            images: self.images(),
            deadlines: self.deadlines(),
            ..self.kubernetes.clone()
        }
    }

    /// `[docker]` with the per-engine images and deadlines.
    pub fn docker_config(&self) -> DockerConfig {
        DockerConfig {
            images: self.images(),
            deadlines: self.deadlines(),
            ..self.docker.clone()
        }
    }

    /// `[process]` with the per-engine deadlines.
    pub fn process_config(&self) -> ProcessConfig {
        ProcessConfig {
            deadlines: self.deadlines(),
            ..self.process.clone()
        }
    }
}
