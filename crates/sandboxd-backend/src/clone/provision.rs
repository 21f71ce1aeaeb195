//! A fresh instance made a clone in one step, cold for an agent or warm for a pool; on any
//! failure the instance is torn down. Its database is renamed after the source's first
//! ([`clone_database_name`]), so the agent's URL and `current_database()` name production's.

use sandboxd_domain::Instance;
use sandboxd_domain::clone::{CloneOrigin, Snapshot, clone_database_name};
use sandboxd_domain::engine::{AdminStep, pg_identifier};

use super::apply::{CloneReport, Fidelity, SchemaOwner, apply, hand_over};
use crate::backend::Backend;
use crate::error::{BackendError, wire_error};
use crate::handle::{InstanceHandle, InstanceRequest};
use crate::idle::IdleMember;
use crate::wire::{AdminSession, Reach, postgres};

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
    let made = async {
        let note = name_after_source(backend, &mut instance, snapshot).await?;
        let mut report = apply(backend, &instance, snapshot, fidelity, SchemaOwner::Agent).await?;
        report.notes.extend(note);
        Ok::<_, BackendError>(report)
    }
    .await;
    match made {
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
    let made = async {
        let note = rename_member(backend, &mut member, snapshot).await?;
        let mut report = apply(
            backend,
            &member.instance,
            snapshot,
            Fidelity::FULL,
            SchemaOwner::AtHandOut,
        )
        .await?;
        report.notes.extend(note);
        Ok::<_, BackendError>(report)
    }
    .await;
    match made {
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

/// The name `instance`'s database takes as a clone of `snapshot` ([`clone_database_name`]),
/// and the note when that is not the source's (a name the server keeps for sandboxd: what a
/// reset never drops).
fn database_for(instance: &Instance, snapshot: &Snapshot) -> (String, Option<String>) {
    clone_database_name(
        &snapshot.database,
        &instance.database,
        &sandboxd_domain::engines::postgres::kept_databases(),
    )
}

/// What a clone made again from `snapshot` (a reset, which keeps the instance's database and
/// its name) says of that name: why it is not the source's, when it is not.
pub fn database_note(instance: &Instance, snapshot: &Snapshot) -> Option<String> {
    let (name, note) = database_for(instance, snapshot);
    if note.is_some() || name == snapshot.database || snapshot.database.is_empty() {
        return note;
    }
    Some(format!(
        "the source's database is now named {:?}; this clone keeps {:?}, the name it was \
         handed out with (release_sandbox and request_sandbox give one named after the source)",
        snapshot.database, instance.database
    ))
}

/// Renames `instance`'s database after the source's, from the superuser's own database (a
/// database cannot be renamed from inside; the server waits a moment for sessions that just
/// left it). Returns the note when the source's name could not be taken.
async fn name_after_source(
    backend: &dyn Backend,
    instance: &mut Instance,
    snapshot: &Snapshot,
) -> Result<Option<String>, BackendError> {
    let (name, note) = database_for(instance, snapshot);
    if name != instance.database {
        rename_database(backend, instance, name).await?;
    }
    Ok(note)
}

async fn rename_database(
    backend: &dyn Backend,
    instance: &mut Instance,
    name: String,
) -> Result<(), BackendError> {
    let (host, port) = backend.admin_address(instance).await?;
    let client = postgres::connect_admin(
        &instance.admin,
        Reach { host: &host, port },
        instance.engine.admin_database,
    )
    .await
    .map_err(wire_error(
        instance,
        "connecting as superuser to rename the database of",
    ))?;
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} RENAME TO {}",
            pg_identifier(&instance.database),
            pg_identifier(&name)
        ))
        .await
        .map_err(|e| BackendError::Clone {
            name: instance.name.clone(),
            step: "naming its database after the source's",
            detail: postgres::refused(e).0,
        })?;
    instance.database = name;
    Ok(())
}

/// [`name_after_source`] for a pool member, whose held superuser session sits in the database
/// to rename: it moves to the superuser's own database for the rename, then into the renamed
/// one, and the hand-out's statements are made again for the new name.
async fn rename_member(
    backend: &dyn Backend,
    member: &mut IdleMember,
    snapshot: &Snapshot,
) -> Result<Option<String>, BackendError> {
    let (name, note) = database_for(&member.instance, snapshot);
    if name == member.instance.database {
        return Ok(note);
    }
    let engine = member.instance.engine;
    let admin = member.instance.admin.clone();
    let (host, port) = backend.admin_address(&member.instance).await?;
    let reach = Reach { host: &host, port };
    const HOLDING: &str = "holding a superuser connection to";
    member.session = AdminSession::open(engine, &admin, reach, engine.admin_database)
        .await
        .map_err(wire_error(&member.instance, HOLDING))?;
    rename_database(backend, &mut member.instance, name).await?;
    member.session = AdminSession::open(engine, &admin, reach, &member.instance.database)
        .await
        .map_err(wire_error(&member.instance, HOLDING))?;
    let facts = member
        .session
        .facts()
        .await
        .map_err(wire_error(&member.instance, "asking the server facts of"))?;
    member.mint = engine.mint(&member.agent, facts, &member.instance.database);
    Ok(note)
}

/// The origin a clone made from `snapshot` records: the snapshot's, with what making it
/// noted.
pub fn origin_of(snapshot: &Snapshot, report: &CloneReport) -> CloneOrigin {
    let mut origin = CloneOrigin::of(snapshot, snapshot.major());
    origin.notes.clone_from(&report.notes);
    origin
}

async fn remove_failed(backend: &dyn Backend, instance: &Instance) {
    if let Err(teardown) = backend.teardown(&InstanceHandle::of(instance)).await {
        tracing::warn!(instance = %instance.name, error = %teardown, "removing a clone that failed");
    }
}
