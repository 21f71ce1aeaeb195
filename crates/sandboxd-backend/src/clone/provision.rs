//! A fresh instance made a clone in one step, cold for an agent or warm for a pool; on any
//! failure the instance is torn down.

use sandboxd_domain::Instance;
use sandboxd_domain::clone::{CloneOrigin, Snapshot};
use sandboxd_domain::engine::AdminStep;

use super::apply::{CloneReport, Fidelity, SchemaOwner, apply, hand_over};
use crate::backend::Backend;
use crate::error::BackendError;
use crate::handle::{InstanceHandle, InstanceRequest};
use crate::idle::IdleMember;

/// Provisions an instance for `request` (whose `major` must be the snapshot's) and makes it a
/// clone of `snapshot`; on any failure the instance is torn down.
pub async fn provision_clone(
    backend: &dyn Backend,
    request: &InstanceRequest,
    snapshot: &Snapshot,
    fidelity: Fidelity,
) -> Result<(Instance, CloneReport), BackendError> {
    let mut request = request.clone();
    request.major = Some(snapshot.major());
    let mut instance = backend.provision(&request).await?;
    match apply(backend, &instance, snapshot, fidelity, SchemaOwner::Agent).await {
        Ok(report) => {
            instance.clone = Some(origin_of(snapshot, &report));
            Ok((instance, report))
        }
        Err(err) => {
            remove_failed(backend, &instance).await;
            Err(err)
        }
    }
}

/// Starts a warm-pool member that is already a clone of `snapshot` (everything
/// [`provision_clone`] does but for the owner: the schema stays the superuser's until the
/// hand-out, whose minting hands it to the new account in the same round trips). On any
/// failure the member is torn down.
pub async fn provision_idle_clone(
    backend: &dyn Backend,
    request: &InstanceRequest,
    snapshot: &Snapshot,
) -> Result<(IdleMember, CloneReport), BackendError> {
    let mut request = request.clone();
    request.major = Some(snapshot.major());
    let mut member = backend.provision_idle(&request).await?;
    match apply(
        backend,
        &member.instance,
        snapshot,
        Fidelity::FULL,
        SchemaOwner::AtHandOut,
    )
    .await
    {
        Ok(report) => {
            member.instance.clone = Some(origin_of(snapshot, &report));
            let database = member.instance.database.clone();
            let hand_over = hand_over(member.minted_user());
            member.mint_also(AdminStep::Sql {
                database: Some(database),
                statement: hand_over.into(),
            });
            Ok((member, report))
        }
        Err(err) => {
            let instance = member.instance.clone();
            drop(member);
            remove_failed(backend, &instance).await;
            Err(err)
        }
    }
}

fn origin_of(snapshot: &Snapshot, report: &CloneReport) -> CloneOrigin {
    let mut origin = CloneOrigin::of(snapshot, snapshot.major());
    origin.notes.clone_from(&report.notes);
    origin
}

async fn remove_failed(backend: &dyn Backend, instance: &Instance) {
    if let Err(teardown) = backend.teardown(&InstanceHandle::of(instance)).await {
        tracing::warn!(instance = %instance.name, error = %teardown, "removing a clone that failed");
    }
}
