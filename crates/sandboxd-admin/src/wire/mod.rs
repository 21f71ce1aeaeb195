//! The admin API's wire types. The broker's and the store's types are not the wire format: each
//! is mapped here, field by field, so a change inside cannot silently change the API (and a
//! token hash or a credential cannot leak through a derived `Serialize`).
//!
//! The module is public and every type goes both ways (`Serialize` and `Deserialize`): the
//! daemon encodes answers with them and the `sandboxd` CLI decodes them, so the two cannot
//! disagree about a field's name or type. Answers do not deny unknown fields (an older client
//! still reads a newer daemon's answer); request bodies do (a typo is refused, not ignored).
//!
//! One file per resource of `/v1`, each type beside the broker's or the domain's type it is
//! mapped from; every type is re-exported here, so a client names it `sandboxd_admin::wire::…`.

mod agents;
mod audit;
mod error;
mod janitor;
mod pools;
mod projects;
mod sandboxes;
mod settings;
mod sources;
mod tasks;

pub use agents::{AgentOut, AgentsQuery, SpawnAgent, SpawnedOut};
pub use audit::{AuditEntryOut, AuditPageOut, AuditQuery, actor_text};
pub use error::ErrorBody;
pub use janitor::{JanitorOut, ReapedOut};
pub use pools::{PoolOut, PutPool};
pub use projects::{ProjectOut, PutProject};
pub use sandboxes::{InstanceOut, SandboxOut, SandboxesQuery, TeardownOut};
pub use settings::{PutSettings, RestartOut, Settings};
pub use sources::{
    LeftOutOut, PutSource, SnapshotOut, SnapshotSummaryOut, SourceOut, SourceTlsOut,
};
pub use tasks::{NewTask, TaskOut, TasksQuery};

#[cfg(test)]
mod tests;
