//! `sandboxd settings [set sandbox_db_enabled=true]`: the master switch of the running daemon.
//! A change is stored at once and takes effect at the next restart (`sandboxd restart`); both
//! values are shown, and `ROBOCO_SANDBOX_DB_ENABLED` when it overrides them.

use std::process::ExitCode;

use sandboxd_admin::wire::{PutSettings, Settings as SettingsOut};
use sandboxd_broker::{SANDBOX_DB_ENABLED, parse_switch};

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
use crate::exit::EXIT_INPUT;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Store a setting: `sandbox_db_enabled=true` (or false); takes effect at the next restart
    /// (`sandboxd restart`).
    Set {
        #[arg(value_name = "KEY=VALUE")]
        assignment: String,
    },
}

fn on_off(value: bool) -> &'static str {
    if value { "on" } else { "off" }
}

fn show(settings: &SettingsOut) {
    let stored = settings.sandbox_db_enabled_stored;
    let running = settings.sandbox_db_enabled_running;
    println!(
        "{}",
        output::table(
            &["setting", "stored", "running", "override"],
            vec![vec![
                SANDBOX_DB_ENABLED.to_owned(),
                on_off(stored).into(),
                on_off(running).into(),
                settings.override_env.clone().unwrap_or_else(|| "-".into()),
            ]]
        )
    );
    match &settings.override_env {
        Some(text) => println!(
            "{text} in the daemon's environment overrides the stored value, also after \
             `sandboxd restart` (which keeps the environment); unset it where sandboxd is \
             started to let the stored value rule"
        ),
        None if settings.restart_pending => {
            println!("the stored value takes effect {}", settings.takes_effect)
        }
        None => {}
    }
    println!(
        "this daemon's id: {} (the maker of its sandboxes)",
        settings.daemon_id
    );
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    let answer = match args.command {
        None => client.settings().await,
        Some(Command::Set { assignment }) => {
            let (key, value) = assignment.split_once('=').unwrap_or((&assignment, ""));
            if key.trim() != SANDBOX_DB_ENABLED {
                eprintln!("error: unknown setting {key:?}; settings: {SANDBOX_DB_ENABLED}");
                return ExitCode::from(EXIT_INPUT);
            }
            let Some(enabled) = parse_switch(value) else {
                eprintln!(
                    "error: {SANDBOX_DB_ENABLED} takes true/false, 1/0, yes/no or on/off, got {value:?}"
                );
                return ExitCode::from(EXIT_INPUT);
            };
            let body = PutSettings {
                sandbox_db_enabled: enabled,
            };
            client.put_settings(&body).await
        }
    };
    match answer {
        Ok(reply) => reply.print(args.remote.json, show),
        Err(err) => return err.fail(),
    }
    ExitCode::SUCCESS
}
