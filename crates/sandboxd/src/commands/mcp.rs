//! `sandboxd mcp`: one agent's verbs over stdio, for MCP clients that launch a command. Relays to
//! the running daemon. The agent token comes from `SANDBOXD_AGENT_TOKEN` (or `--token`, which
//! every user of the machine can read in `ps`).

use std::process::ExitCode;

use secrecy::SecretString;

use crate::config::Settings;

/// Where the agent token is read from.
pub const AGENT_TOKEN_ENV: &str = "SANDBOXD_AGENT_TOKEN";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent token issued at spawn. Prefer the environment variable: a command-line argument
    /// is visible to every user of the machine. Without one, the MCP client's first request is
    /// answered with an error saying what to set.
    #[arg(long, env = AGENT_TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// The daemon's base URL (default: http://<server.listen>).
    #[arg(long, env = "SANDBOXD_URL")]
    pub url: Option<String>,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    if args.token.is_some() && std::env::var(AGENT_TOKEN_ENV).ok() != args.token {
        eprintln!(
            "warning: the agent token is on the command line, where `ps` shows it to every user; \
             set {AGENT_TOKEN_ENV} instead"
        );
    }
    let url = args
        .url
        .unwrap_or_else(|| format!("http://{}", settings.server.listen));
    match crate::stdio_relay::serve_stdio(&url, args.token.map(SecretString::from)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
