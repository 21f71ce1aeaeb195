//! `sandboxd doctor`: what is installed, what is missing, and what to install.

use std::process::ExitCode;

use sandboxd_backend::DoctorCheck;

use crate::backends;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long)]
    pub json: bool,
}

pub async fn checks(settings: &Settings) -> Vec<DoctorCheck> {
    let (progress, _) = output::progress();
    let mut checks = Vec::new();
    match backends::process(settings, progress.clone()) {
        Ok(process) => {
            use sandboxd_backend::Backend;
            checks.extend(process.doctor().await);
        }
        Err(err) => checks.push(DoctorCheck::missing(
            "process backend",
            err.to_string(),
            "see the message",
        )),
    }
    match backends::docker(settings) {
        Ok(docker) => {
            use sandboxd_backend::Backend;
            checks.extend(docker.doctor().await);
        }
        Err(err) => checks.push(DoctorCheck::missing(
            "docker backend",
            err.to_string(),
            "fix the [docker] settings",
        )),
    }
    checks
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let checks = checks(settings).await;
    if args.json {
        println!("{}", output::json(&checks));
    } else {
        let rows = checks
            .iter()
            .map(|c| {
                vec![
                    if c.ok { "ok" } else { "MISSING" }.to_owned(),
                    c.subject.clone(),
                    c.detail.clone(),
                    c.fix.clone().unwrap_or_default(),
                ]
            })
            .collect();
        println!("{}", output::table(&["", "what", "found", "fix"], rows));
    }
    ExitCode::SUCCESS
}
