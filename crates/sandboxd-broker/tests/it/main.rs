//! Black-box tests of the broker against real backends and a real store: one binary.

mod guards;
mod restart;
mod sandbox;
mod support;
