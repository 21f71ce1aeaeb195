//! Black-box tests of the broker against real backends and a real store: one binary.

mod audit;
mod clone_identity;
mod faults;
mod features;
mod guards;
mod kube;
mod lifecycle;
mod pool_hand_outs;
mod pools;
mod restart;
mod role_texts;
mod sandbox;
mod sizes;
mod sources;
mod support;
