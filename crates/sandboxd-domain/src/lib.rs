//! The vocabulary of sandboxd: validated names, the engine registry, credentials, the evidence an
//! agent receives, role manifests and the envelopes every verb answers with.
//!
//! Parts:
//! - [`entities`]: the records every layer talks about (agents, projects, tasks, sources, who
//!   acted); [`audit`]: the audit trail's entries and how it is read.
//! - [`clock`]: the one clock (Unix milliseconds) and the one age format.
//! - [`clone`]: production-faithful clones: what a snapshot holds and the pure plans that apply it.
//! - [`names`]: newtypes built by `parse` (`AgentSlug`, `ProjectSlug`, `EnvPrefix`).
//! - [`engine`]: an engine as data (`Engine`, one `static` per engine) plus its behaviour as pure
//!   functions (`EngineRecipes`); [`engines`]: the registry, the one place that lists engines, and
//!   the `EngineRef` handle.
//! - [`features`]: per-engine feature sets validated against an engine's allowlist.
//! - [`credentials`]: CSPRNG secrets and the credentials of a service instance.
//! - [`instance`]: what a backend hands back for one running service, and the evidence rendered
//!   from it (§3.4 of the spec).
//! - [`roles`]: verbs, roles and manifests (§3.1); [`hints`]: what each role is told to call
//!   next, naming only its own verbs.
//! - [`guards`]: `request_sandbox`'s guard chain as one pure decision over gathered inputs.
//! - [`space`]: the size of an instance's data space, a project's sizes per engine, and how the
//!   memory cap grows with it.
//! - [`lifecycle`]: the task state machine of the lifecycle verbs (§3.3).
//! - [`envelope`]: the ok / error envelopes (§3.2).
//! - [`verbs`]: the arguments of every verb, with their JSON schemas and descriptions; [`call`]:
//!   one agent call parsed into a variant per verb, so JSON stops at the gateway.
//!
//! This crate does no I/O: no tokio, no Docker, no SQL driver. Everything here is data and pure
//! functions so the outer layers can share it without sharing their dependencies.
#![forbid(unsafe_code)]

pub mod audit;
pub mod call;
pub mod clock;
pub mod clone;
pub mod credentials;
pub mod engine;
pub mod engines;
pub mod entities;
pub mod envelope;
pub mod error;
pub mod features;
pub mod guards;
pub mod hints;
pub mod instance;
pub mod lifecycle;
pub mod names;
pub mod project_sizes;
pub mod roles;
pub mod space;
pub mod verbs;

pub use credentials::{Credentials, generate_secret};
pub use engine::{Engine, Protocol};
pub use engines::EngineRef;
pub use entities::{Actor, Agent, NoteKind, Project, SnapshotSummary, Source, Task, TaskNote};
pub use error::InputError;
pub use features::{Feature, FeatureRequest};
pub use instance::{BackendKind, Instance, ServiceEvidence};
pub use names::{AgentSlug, DaemonId, EnvPrefix, ProjectSlug, SourceName};
pub use project_sizes::ProjectSizes;
pub use space::DataSize;
