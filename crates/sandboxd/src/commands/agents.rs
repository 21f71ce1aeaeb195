//! `sandboxd agents spawn|rm|ls`: agents through the running daemon. `spawn` prints the agent's
//! token once (only its hash is stored), its manifest, spawn environment and briefing.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::json;

use crate::client::{AdminClient, Remote, age_of, list, text};
use crate::commands::projects::encode;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Spawn an agent: prints its token (once), manifest, environment and briefing.
    Spawn {
        #[arg(long)]
        slug: String,
        /// A role of the daemon's role book (developer, qa, pr_reviewer, documenter, auditor).
        #[arg(long)]
        role: String,
        #[arg(long)]
        project: String,
    },
    /// Remove an agent: its sandbox is released and its token stops working.
    Rm { slug: String },
    /// List agents.
    Ls {
        /// Only this project's agents.
        #[arg(long)]
        project: Option<String>,
    },
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Spawn {
            slug,
            role,
            project,
        } => {
            let body = json!({"slug": slug, "role": role, "project": project});
            let spawned = match client
                .call(Method::POST, "/v1/agents", &[], Some(&body))
                .await
            {
                Ok(spawned) => spawned,
                Err(err) => return err.fail(),
            };
            if args.remote.json {
                println!("{}", output::json(&spawned));
                return ExitCode::SUCCESS;
            }
            println!(
                "spawned {} ({} on {})",
                text(&spawned, "agent"),
                text(&spawned, "role"),
                text(&spawned, "project")
            );
            println!("token:    {}", text(&spawned, "token"));
            eprintln!("          (shown once: only its hash is stored)");
            println!("manifest: {}", list(&spawned, "manifest"));
            if let Some(env) = spawned["env"].as_object().filter(|e| !e.is_empty()) {
                println!("env:");
                for (key, value) in env {
                    println!("  {key}={}", value.as_str().unwrap_or_default());
                }
            }
            if let Some(lines) = spawned["briefing"].as_array() {
                println!("briefing:");
                for line in lines {
                    println!("  {}", line.as_str().unwrap_or_default());
                }
            }
        }
        Command::Rm { slug } => {
            let path = format!("/v1/agents/{}", encode(&slug));
            match client.call(Method::DELETE, &path, &[], None::<&()>).await {
                Ok(_) if args.remote.json => {
                    println!("{}", output::json(&json!({"removed": slug})))
                }
                Ok(_) => println!("removed {slug}"),
                Err(err) => return err.fail(),
            }
        }
        Command::Ls { project } => {
            let query: Vec<(&str, String)> = project.into_iter().map(|p| ("project", p)).collect();
            match client.get("/v1/agents", &query).await {
                Ok(agents) => output::print_list(
                    &agents,
                    args.remote.json,
                    "no agents",
                    &["agent", "role", "project", "age"],
                    |a| {
                        vec![
                            text(a, "slug"),
                            text(a, "role"),
                            text(a, "project"),
                            age_of(a, "created_at_ms"),
                        ]
                    },
                ),
                Err(err) => return err.fail(),
            }
        }
    }
    ExitCode::SUCCESS
}
