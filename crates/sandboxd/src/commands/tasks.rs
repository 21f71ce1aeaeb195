//! `sandboxd tasks add|ls`: a project's tasks, through the running daemon.

use std::process::ExitCode;

use sandboxd_admin::wire::{NewTask, TasksQuery};
use sandboxd_domain::clock::format_age_since;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;

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
            let body = NewTask {
                project,
                title,
                description,
            };
            match client.add_task(&body).await {
                Ok(reply) => reply.print(args.remote.json, |task| {
                    println!("added {} to {} ({})", task.id, task.project, task.state)
                }),
                Err(err) => return err.fail(),
            }
        }
        Command::Ls { project, state } => {
            match client.tasks(&TasksQuery { project, state }).await {
                Ok(tasks) => tasks.print_list(
                    args.remote.json,
                    "no tasks",
                    &["task", "project", "state", "held by", "age", "title"],
                    |t| {
                        vec![
                            t.id.clone(),
                            t.project.clone(),
                            t.state.clone(),
                            t.claimed_by.clone().unwrap_or_default(),
                            format_age_since(t.created_at_ms),
                            t.title.clone(),
                        ]
                    },
                ),
                Err(err) => return err.fail(),
            }
        }
    }
    ExitCode::SUCCESS
}
