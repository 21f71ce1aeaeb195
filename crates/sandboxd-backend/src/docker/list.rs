//! Listing: every container carrying the sandbox label, read from its labels and published
//! ports, never from memory.

use bollard::query_parameters::ListContainersOptions;
use sandboxd_domain::AgentSlug;
use sandboxd_domain::instance::{BackendKind, instance_name, parse_instance_name};

use super::labels::Parsed;
use super::{DockerBackend, client, spec};
use crate::error::BackendError;
use crate::handle::{InstanceHandle, ListedInstance};

impl DockerBackend {
    pub(super) async fn list_instances(&self) -> Result<Vec<ListedInstance>, BackendError> {
        let docker = self.client.get().await?;
        let options = ListContainersOptions {
            all: true,
            filters: Some(self.labels.filter()),
            ..ListContainersOptions::default()
        };
        let summaries = client::read_settled(|| docker.list_containers(Some(options.clone())))
            .await
            .map_err(|err| client::error("listing", "containers", err))?;
        let mut listed = Vec::new();
        for summary in summaries {
            let Some(parsed) = self.labels.parse(summary.labels.as_ref()) else {
                tracing::warn!(id = ?summary.id, "a labeled container with unreadable labels");
                continue;
            };
            let mut parsed = parsed;
            if parsed.owner.is_pool_slot() {
                // A handed-out pool member: its name says whose it is now.
                if let Some(owner) = handed_to(summary.names.as_deref(), &parsed) {
                    parsed.owner = owner;
                }
            }
            let name = instance_name(parsed.engine, &parsed.owner, &parsed.maker);
            let status = summary
                .state
                .map(|s| s.to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".to_owned());
            let (host, port) = match &parsed.network {
                Some(_) => (name.clone(), parsed.port),
                None => {
                    let published = summary.ports.iter().flatten().find_map(|p| {
                        (p.private_port == parsed.port && p.ip.as_deref() == Some(spec::PUBLISH_IP))
                            .then_some(p.public_port)
                            .flatten()
                    });
                    (spec::PUBLISH_IP.to_owned(), published.unwrap_or(0))
                }
            };
            listed.push(ListedInstance {
                handle: InstanceHandle {
                    engine: parsed.engine,
                    owner: parsed.owner,
                    maker: parsed.maker,
                    backend: BackendKind::Docker,
                    backend_id: summary.id.unwrap_or_default(),
                    name,
                },
                host,
                port,
                created_at_ms: parsed.created_at_ms,
                // The summary has no OOM flag; `is_live` inspects for it.
                live: status == "running",
                status,
                image: summary.image.filter(|i| !i.is_empty()),
            });
        }
        listed.sort_by(|a, b| a.handle.name.cmp(&b.handle.name));
        Ok(listed)
    }
}

/// The owner a pool member's container was renamed for at hand-out (`Backend::record_owner`):
/// the owner part of its current name, when that name is an instance name of the same engine
/// and maker.
fn handed_to(names: Option<&[String]>, parsed: &Parsed) -> Option<AgentSlug> {
    names?.iter().find_map(|name| {
        let (engine, owner, maker) = parse_instance_name(name.trim_start_matches('/'))?;
        (engine == parsed.engine && maker == parsed.maker).then_some(owner)
    })
}
