//! Black-box tests of the operator surface: the admin API, the panel (over HTTP and in a real
//! headless Chromium) and /metrics, against a real broker, store and backend. One binary.

mod api;
mod browser;
mod metrics;
mod panel;
mod pools_form;
mod support;
