//! Black-box tests of the backends against real servers: one binary for the crate.

mod attack_docker;
mod attack_process;
mod bounded_answers;
mod clone;
mod clone_expression;
mod clone_extended;
mod clone_tls;
mod clone_traps;
mod clone_wide;
mod docker;
mod every_database;
mod features;
mod kube;
mod pool;
mod process;
mod redteam;
mod reset;
mod space;
mod suites_expect;
mod support;
