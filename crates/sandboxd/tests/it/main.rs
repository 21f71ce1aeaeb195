//! Black-box tests of the `sandboxd` binary: the real daemon on port 0 with a fresh state, real
//! MCP clients over HTTP and stdio, real databases. One binary.

mod architecture;
mod audit;
mod cli;
mod costs;
mod engines;
mod experiments;
mod http_hardening;
mod limits;
mod logs;
mod mcp;
mod mcp_http;
mod operator_cli;
mod ownership;
mod pools;
mod python_client;
mod python_sdk;
mod replicas;
mod restart_action;
mod sandbox_verbs;
mod soak;
mod support;
