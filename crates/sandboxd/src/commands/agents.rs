//! `sandboxd agents spawn|rm|ls`: agents through the running daemon. `spawn` prints the agent's
//! token once (only its hash is stored), its manifest, spawn environment and briefing.

use std::process::ExitCode;

use sandboxd_admin::wire::{AgentsQuery, SpawnAgent, SpawnedOut};
use sandboxd_domain::clock::format_age_since;
use serde_json::json;

use crate::client::{AdminClient, Remote};
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

fn show_spawned(spawned: &SpawnedOut) {
    println!(
        "spawned {} ({} on {})",
        spawned.agent, spawned.role, spawned.project
    );
    println!("token:    {}", spawned.token);
    eprintln!("          (shown once: only its hash is stored)");
    println!("manifest: {}", spawned.manifest.join(", "));
    if !spawned.env.is_empty() {
        println!("env:");
        for (key, value) in &spawned.env {
            println!("  {key}={value}");
        }
    }
    println!("briefing:");
    for line in &spawned.briefing {
        println!("  {line}");
    }
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
            let body = SpawnAgent {
                slug,
                role,
                project,
            };
            match client.spawn_agent(&body).await {
                Ok(reply) => reply.print(args.remote.json, show_spawned),
                Err(err) => return err.fail(),
            }
        }
        Command::Rm { slug } => match client.remove_agent(&slug).await {
            Ok(_) if args.remote.json => {
                println!("{}", output::json(&json!({"removed": slug})))
            }
            Ok(_) => println!("removed {slug}"),
            Err(err) => return err.fail(),
        },
        Command::Ls { project } => match client.agents(&AgentsQuery { project }).await {
            Ok(agents) => agents.print_list(
                args.remote.json,
                "no agents",
                &["agent", "role", "project", "age"],
                |a| {
                    vec![
                        a.slug.clone(),
                        a.role.clone(),
                        a.project.clone(),
                        format_age_since(a.created_at_ms),
                    ]
                },
            ),
            Err(err) => return err.fail(),
        },
    }
    ExitCode::SUCCESS
}
