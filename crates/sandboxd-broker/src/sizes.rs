//! A project's data space per engine (`sandboxd projects set … --size postgres=2G`): checked
//! against the operator's ceiling (`broker.max_sandbox_size_mb`) before anything is stored, and
//! the size each instance of the project's sandboxes is provisioned with. A cached member of
//! another size is replaced like a clone of another source; a warm-pool member (made at its
//! backend's default) is taken only when that is the size wanted.

use std::time::Instant;

use sandboxd_domain::{Actor, Project};
use sandboxd_domain::{DataSize, EngineRef, InputError, Instance, ProjectSizes, ProjectSlug};

use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::{BrokerError, not_opted_in};

impl Broker {
    /// The operator's ceiling on one engine's data space.
    pub fn max_sandbox_size(&self) -> DataSize {
        DataSize::from_mb(self.inner.config.max_sandbox_size_mb)
    }

    /// The data space an engine gets where its project sets none: the primary backend's
    /// default.
    pub fn default_sandbox_size(&self) -> DataSize {
        self.default_size_for(None)
    }

    /// Refuses sizes a project may not have, before anything is stored: each for an opted-in
    /// engine (that keeps its data on disk: [`ProjectSizes`] holds no other) and none above
    /// the operator's ceiling, which the refusal names.
    pub fn check_project_sizes(
        &self,
        services: &[EngineRef],
        sizes: &ProjectSizes,
    ) -> Result<(), BrokerError> {
        let ceiling = self.max_sandbox_size();
        for (engine, size) in sizes.iter() {
            if !services.contains(&engine) {
                return Err(not_opted_in(
                    "sandbox_sizes",
                    "a size for",
                    engine,
                    services,
                ));
            }
            if size > ceiling {
                return Err(InputError::Malformed {
                    what: "sandbox_sizes",
                    detail: format!(
                        "{engine}={size} is above this sandboxd's ceiling of {ceiling} \
                         (broker.max_sandbox_size_mb = {}); ask for at most {ceiling}, or have \
                         the operator raise the ceiling",
                        ceiling.mb()
                    ),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Sets a project's data space per engine (empty: every engine at its backend's default),
    /// checked as [`Broker::check_project_sizes`] says. Live sandboxes take the new size when
    /// next requested: a member of another size is replaced, with new credentials.
    pub async fn set_project_sizes(
        &self,
        slug: &ProjectSlug,
        sizes: ProjectSizes,
    ) -> Result<Project, BrokerError> {
        let started = Instant::now();
        let project = self.existing_project(slug).await?;
        let services = project.sandbox_services.unwrap_or_default();
        self.check_project_sizes(&services, &sizes)?;
        let project = self.store().set_project_sizes(slug, &sizes).await?;
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetProject,
            subject: slug.as_str(),
            project: Some(slug),
            outcome: Outcome::Ok,
            started,
            detail: format!("sizes {sizes}"),
        })
        .await;
        Ok(project)
    }

    /// The backend default of the data space of an instance of `engine`'s kind (the primary
    /// backend's when `instance` is None).
    fn default_size_for(&self, instance: Option<&Instance>) -> DataSize {
        let backends = &self.inner.backends;
        match instance {
            Some(instance) => backends
                .for_kind(instance.backend)
                .map_or(DataSize::CONTAINER_DEFAULT, |b| b.default_size()),
            None => backends.primary().default_size(),
        }
    }

    /// The size an instance of `engine` is made with for a project of `sizes`: the project's
    /// own, or None (the backend's default).
    pub(crate) fn wanted_size(sizes: &ProjectSizes, engine: EngineRef) -> Option<DataSize> {
        engine.data_on_disk.then(|| sizes.get(engine)).flatten()
    }

    /// Whether a warm-pool member of the primary backend (made at its default) is of the size
    /// `sizes` wants for `engine`.
    pub(crate) fn pool_fits(&self, sizes: &ProjectSizes, engine: EngineRef) -> bool {
        Self::wanted_size(sizes, engine).is_none_or(|size| size == self.default_size_for(None))
    }

    /// Whether a cached member has the data space its project wants now (a member recorded
    /// before sizes were is taken as its backend's default).
    pub(crate) fn size_matches(&self, instance: &Instance, sizes: &ProjectSizes) -> bool {
        if !instance.engine.data_on_disk {
            return true;
        }
        let default = self.default_size_for(Some(instance));
        let wanted = Self::wanted_size(sizes, instance.engine).unwrap_or(default);
        instance.size.unwrap_or(default) == wanted
    }
}
