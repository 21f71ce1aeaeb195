//! `sandboxd tasks add|ls`: a project's tasks, through the running daemon.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::json;

use crate::client::{AdminClient, Remote, age_of, text};
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
    /// Add an open task to a project.
    Add {
        #[arg(long)]
        project: String,
        #[arg(long)]
        title: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List tasks.
    Ls {
        #[arg(long)]
        project: Option<String>,
        /// open, in_progress, review, in_review or done.
        #[arg(long)]
        state: Option<String>,
    },
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Add {
            project,
            title,
            description,
        } => {
            let body = json!({"project": project, "title": title, "description": description});
            match client
                .call(Method::POST, "/v1/tasks", &[], Some(&body))
                .await
            {
                Ok(task) if args.remote.json => println!("{}", output::json(&task)),
                Ok(task) => println!(
                    "added {} to {} ({})",
                    text(&task, "id"),
                    text(&task, "project"),
                    text(&task, "state")
                ),
                Err(err) => return err.fail(),
            }
        }
        Command::Ls { project, state } => {
            let query: Vec<(&str, String)> = project
                .map(|p| ("project", p))
                .into_iter()
                .chain(state.map(|s| ("state", s)))
                .collect();
            match client.get("/v1/tasks", &query).await {
                Ok(tasks) => output::print_list(
                    &tasks,
                    args.remote.json,
                    "no tasks",
                    &["task", "project", "state", "held by", "age", "title"],
                    |t| {
                        vec![
                            text(t, "id"),
                            text(t, "project"),
                            text(t, "state"),
                            text(t, "claimed_by"),
                            age_of(t, "created_at_ms"),
                            text(t, "title"),
                        ]
                    },
                ),
                Err(err) => return err.fail(),
            }
        }
    }
    ExitCode::SUCCESS
}
