//! `sandboxd mcp --token …`: one agent's verbs over stdio, for MCP clients that launch a
//! command. Relays to the running daemon.

use std::process::ExitCode;

use secrecy::SecretString;

use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent token issued at spawn.
    #[arg(long, env = "SANDBOXD_AGENT_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The daemon's base URL (default: http://<server.listen>).
    #[arg(long, env = "SANDBOXD_URL")]
    pub url: Option<String>,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let url = args
        .url
        .unwrap_or_else(|| format!("http://{}", settings.server.listen));
    match sandboxd_mcp::serve_stdio(&url, SecretString::from(args.token)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
