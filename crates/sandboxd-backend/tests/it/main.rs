//! Black-box tests of the backends against real servers: one binary for the crate.

mod attack_docker;
mod attack_process;
mod clone;
mod clone_fixture;
mod docker;
mod features;
mod kube;
mod pool;
mod process;
mod reset;
mod support;
