//! sandboxd, the binary's library: the CLI, configuration, and the wiring of the layers.
//!
//! Parts:
//! - [`cli`]: the command line (`clap`), one module per command under [`commands`].
//! - [`config`]: one settings tree: defaults → TOML file → `SANDBOXD_*` environment.
//! - [`backends`]: builds the backend the settings ask for (`auto` picks Docker when it can).
//! - [`daemon`]: the state directory, store, key, roles, backends and broker of `serve`.
//! - [`http`]: the daemon's one listener: `/mcp`, `/v1`, the panel, `/metrics`, behind a
//!   Host/Origin guard.
//! - [`client`]: the operator commands' client for a running daemon's admin API.
//! - [`stdio_relay`]: `sandboxd mcp`, a stdio MCP server relaying to the daemon's `/mcp` with the
//!   agent's token, so there is always exactly one broker.
//! - [`logging`]: the log filter per `-v` level and the redactor every log line passes through.
//! - [`exit`]: the exit codes every command shares (2: the caller's input was refused).
//!
//! This crate holds no domain logic: it parses, wires and prints.
#![forbid(unsafe_code)]

pub mod backends;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod exit;
pub mod http;
pub mod logging;
pub mod output;
pub mod stdio_relay;
