//! Backends run database instances for sandboxd. Parts:
//! - [`backend`]: the `Backend` trait every way of running instances implements; what it takes
//!   and gives sits below it: `handle` (request, handle, listing), `doctor`, `idle` (a pool
//!   member); `members` beside it makes what a backend makes for itself (a held pool member,
//!   a feature probe's throwaway instance).
//! - [`docker`]: hardened sibling containers through the Docker Engine API (production).
//! - [`process`]: local child processes from the host's packages (the embedded default).
//! - [`kube`]: Pods on a Kubernetes cluster (kube-rs), for fleets beyond one host.
//! - `labels`: the label schema Docker and Kubernetes write on what they make, each under its
//!   own namespace.
//! - [`wire`]: one client per protocol family (Postgres, Redis, MySQL, MongoDB) for setup,
//!   readiness probes and feature activation.
//! - [`clone`]: production-faithful clones: a snapshot read from a source, applied to a fresh
//!   instance of the same major version.
//! - [`probe`]: which allowlisted features a backend really provides, found on a throwaway
//!   instance.
//! - [`set`]: whole-set provisioning, all or nothing.
//! - [`readiness`]: polling an authenticated round trip up to a deadline.
//! - [`versions`]: server version numbers as `doctor` reports and compares them.
//! - [`duration_serde`]: `*_secs` / `*_ms` settings keys read as `Duration`s.
//!
//! This crate keeps no state of its own beyond what it writes beside instances (labels,
//! metadata files): it does not know about agents, tasks, the store or the guard chain.
#![forbid(unsafe_code)]

pub mod backend;
pub mod clone;
pub mod docker;
mod doctor;
pub mod duration_serde;
pub mod error;
mod handle;
mod idle;
mod image_tags;
pub mod kube;
mod labels;
mod members;
pub mod probe;
pub mod process;
pub mod readiness;
pub mod set;
mod startup;
pub mod versions;
pub mod wire;

pub use backend::{Backend, Sweep};
pub use doctor::DoctorCheck;
pub use error::BackendError;
pub use handle::{InstanceHandle, InstanceRequest, ListedInstance};
pub use idle::{IdleMember, PROOF_MAX_AGE, REPROVE_AFTER};
pub use probe::FeatureProbe;
pub use set::{all_or_nothing, provision_set, provision_set_timed, teardown_all};
