//! `sandboxd restart`: restarts the running daemon in place (`POST /v1/restart`) and waits until
//! it answers again. The daemon drains and re-executes itself: same pid, so a supervisor sees no
//! exit; live sandboxes stay with their credentials; a stored switch takes effect.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use sandboxd_admin::wire::{RestartOut, Settings as SettingsOut};

use crate::client::{AdminClient, ClientError, Remote};
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub remote: Remote,
    /// Return once the daemon accepted the request, without waiting for it to answer again.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the restarted daemon (seconds); it adopts every live sandbox first.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

fn on_off(value: bool) -> &'static str {
    if value { "on" } else { "off" }
}

fn show_restarted(settings: &SettingsOut) {
    let rules = match &settings.override_env {
        Some(text) => format!("{text} in its environment"),
        None => "stored".to_owned(),
    };
    println!(
        "sandboxd restarted; sandbox_db_enabled running = {} ({rules})",
        on_off(settings.sandbox_db_enabled_running)
    );
}

/// Polls `/v1/settings` until a run newer than `before` answers, or the deadline passes. While
/// the daemon drains and starts, requests are refused or cut: that is the restart, not an error.
async fn wait_for_new_run(
    client: &AdminClient,
    before: i64,
    timeout: Duration,
) -> Result<crate::client::Reply<SettingsOut>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match client.settings().await {
            Ok(reply) if reply.value.running_since_ms != before => return Ok(reply),
            Ok(_) => "the old run still answers (draining)".to_owned(),
            Err(err @ ClientError::Refused { .. }) => return Err(err.to_string()),
            Err(err) => err.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "sandboxd did not answer as a new run within {}s ({last}); its log says why",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    let accepted = match client.restart().await {
        Ok(reply) => reply,
        Err(err) => return err.fail(),
    };
    if args.no_wait {
        accepted.print(args.remote.json, |answer: &RestartOut| {
            println!("{}", answer.message);
        });
        return ExitCode::SUCCESS;
    }
    if !args.remote.json {
        eprintln!("{}…", accepted.value.message);
    }
    let before = accepted.value.running_since_ms;
    match wait_for_new_run(&client, before, Duration::from_secs(args.timeout)).await {
        Ok(reply) => {
            reply.print(args.remote.json, show_restarted);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
