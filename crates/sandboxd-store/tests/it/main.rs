//! Black-box tests of the store against real databases: every test runs on SQLite (a temporary
//! file) and on PostgreSQL (started with the process backend). One binary for the crate.

mod agents;
mod audit;
mod instances;
mod leases;
mod open;
mod projects;
mod sessions;
mod sources;
mod support;
mod tasks;
