//! `sandbox_info`: what the agent's sandbox is and when it ends, without changing it (not even
//! its idle clock: looking is not using).

use futures::future::join_all;
use sandboxd_domain::Agent;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::envelope::OkEnvelope;

use super::Answer;
use super::answer::ServiceInfo;
use crate::Broker;

impl Broker {
    /// `sandbox_info`: what the agent's sandbox is, without changing it (not even its idle
    /// clock: looking is not using).
    pub(crate) async fn sandbox_info(&self, agent: &Agent) -> Answer {
        let instances = self.held_sandbox(agent).await?;
        let config = &self.inner.config;
        let described = instances.iter().map(|instance| async move {
            let backend = self.inner.backends.for_kind(instance.backend);
            let live = match backend {
                Some(backend) => backend
                    .is_live(&sandboxd_backend::InstanceHandle::of(instance))
                    .await
                    .unwrap_or(false),
                None => false,
            };
            let version = match (backend, live) {
                (Some(backend), true) => backend
                    .server_version(instance)
                    .await
                    .unwrap_or_else(|err| format!("unknown ({err})")),
                _ => "unknown (not running)".to_owned(),
            };
            let last_used = self
                .store()
                .last_used_of(&instance.name)
                .await
                .ok()
                .flatten()
                .unwrap_or(instance.created_at_ms);
            let idle_ends = config
                .idle_ttl
                .map(|ttl| last_used + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
            let lifetime_ends = config.max_lifetime.map(|max| {
                instance.created_at_ms + i64::try_from(max.as_millis()).unwrap_or(i64::MAX)
            });
            ServiceInfo {
                service: instance.engine.name,
                engine: instance.engine.title,
                version,
                backend: instance.backend.to_string(),
                live,
                features: instance.features.iter().map(|f| f.name()).collect(),
                host: instance.host.clone(),
                port: instance.port,
                database: instance.database.clone(),
                user: instance.agent.user.clone(),
                created_at_ms: instance.created_at_ms,
                last_used_at_ms: last_used,
                idle_timeout_secs: config.idle_ttl.map(|d| d.as_secs()),
                released_if_idle_at_ms: idle_ends,
                max_lifetime_secs: config.max_lifetime.map(|d| d.as_secs()),
                released_at_latest_at_ms: lifetime_ends,
                clone: instance.clone.clone(),
                size_mb: instance.size.map(|size| size.mb()),
            }
        });
        let evidence: Vec<ServiceInfo> = join_all(described).await;
        let now = now_ms();
        let soonest = |at: fn(&ServiceInfo) -> Option<i64>| {
            evidence
                .iter()
                .filter_map(at)
                .min()
                .map(|at| (at - now).max(0) / 1000)
        };
        let ending = match (
            soonest(|info| info.released_if_idle_at_ms),
            soonest(|info| info.released_at_latest_at_ms),
        ) {
            (Some(idle), Some(latest)) if latest <= idle => {
                format!("it is released in {latest} s (maximum lifetime), used or not")
            }
            (Some(idle), Some(latest)) => format!(
                "it is released in {idle} s unless used sooner (idle timeout), and in {latest} s \
                 at the latest (maximum lifetime)"
            ),
            (Some(idle), None) => {
                format!("it is released in {idle} s unless used sooner (idle timeout)")
            }
            (None, Some(latest)) => {
                format!("it is released in {latest} s (maximum lifetime), used or not")
            }
            (None, None) => "it lasts until you release it or finish your task".to_owned(),
        };
        let names: Vec<&str> = instances.iter().map(|i| i.engine.name).collect();
        let held = self.held_task_id(&agent.slug).await;
        Ok((
            OkEnvelope::new(
                held,
                "use the credentials request_sandbox gave you; reset_sandbox empties the sandbox",
                format!("Your sandbox: {}; {ending}.", names.join(", ")),
            )
            .with_evidence(evidence),
            format!("described {}", names.join(",")),
        ))
    }
}
