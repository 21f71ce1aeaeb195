//! `sandboxd sources add|ls|rm|snapshot`: production Postgres servers that clones are made from,
//! through the running daemon's admin API. The DSN goes to the daemon once (from `--dsn`, or
//! from stdin with `--dsn -` so it stays out of the process list and shell history) and never
//! comes back; what is shown of it is how it is reached over TLS, with a warning when that
//! protects nothing on the network.

use std::io::BufRead;
use std::process::ExitCode;

use sandboxd_admin::wire::{PutSource, SourceOut};
use sandboxd_domain::clock::format_age_since;
use sandboxd_domain::clone::Summary;
use serde_json::json;

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
use crate::exit::EXIT_INPUT;
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
    /// Register a source, or replace its DSN and settings (its snapshot is dropped).
    Add {
        name: String,
        /// libpq connection string or postgresql:// URL of a role that may read the catalog
        /// and statistics (e.g. a member of pg_read_all_data); `-` reads it from stdin.
        #[arg(long)]
        dsn: String,
        /// keep-values (statistics with sample values: plans match best) or no-values (no
        /// data value leaves the source).
        #[arg(long, default_value = "keep-values")]
        privacy: String,
        /// Seconds between snapshots; 0: only on `sandboxd sources snapshot`.
        #[arg(long, default_value_t = 0)]
        refresh_secs: u64,
    },
    /// List sources, their last snapshot (what it holds and left out) and last error.
    Ls,
    /// Remove a source and its snapshot (refused while a project clones it).
    Rm { name: String },
    /// Take a snapshot of a source now, and say what it holds and left out, and why.
    Snapshot { name: String },
}

fn row(source: &SourceOut) -> Vec<String> {
    let snapshot = match &source.snapshot {
        Some(s) => format!(
            "{}, {} old, took {} ms",
            s.server_version,
            format_age_since(s.taken_at_ms),
            s.took_ms
        ),
        None => "none yet".into(),
    };
    vec![
        source.name.clone(),
        source.privacy.clone(),
        if source.refresh_secs == 0 {
            "on demand".into()
        } else {
            format!("every {} s", source.refresh_secs)
        },
        snapshot,
        holds_text(source),
        tls_text(source),
        source.last_error.clone().unwrap_or_default(),
    ]
}

/// The holds column: `12 tables, 30 stats rows, 2 left out`.
fn holds_text(source: &SourceOut) -> String {
    match source.snapshot.as_ref().map(|s| s.summary.clone()) {
        Some(Some(summary)) => Summary::from(summary).line(),
        Some(None) => "not recorded (snapshot again)".into(),
        None => String::new(),
    }
}

/// One source as a table, then what its snapshot holds and left out, and why.
fn show(source: &SourceOut) {
    println!("{}", output::table(&HEADER, vec![row(source)]));
    if let Some(summary) = source.snapshot.as_ref().and_then(|s| s.summary.clone()) {
        for line in Summary::from(summary).lines() {
            println!("{line}");
        }
    }
}

/// The TLS column: the mode, what it trusts, and `(default)` when the DSN named none.
fn tls_text(source: &SourceOut) -> String {
    let Some(tls) = &source.tls else {
        return "unknown (its DSN cannot be read)".into();
    };
    let mut text = tls.mode.clone();
    if let Some(roots) = &tls.roots {
        text.push_str(&format!(", roots {roots}"));
    }
    if tls.default {
        text.push_str(" (default)");
    }
    if tls.warning.is_some() {
        text.push_str(" UNVERIFIED");
    }
    text
}

/// A source whose TLS protects nothing on the network: said on stderr, so `--json` stays
/// parseable.
fn warn(source: &SourceOut) {
    if let Some(warning) = source.tls.as_ref().and_then(|t| t.warning.as_ref()) {
        eprintln!("warning: source {}: {warning}", source.name);
    }
}

const HEADER: [&str; 7] = [
    "source",
    "privacy",
    "refresh",
    "snapshot",
    "holds",
    "tls",
    "last error",
];

fn read_dsn(dsn: String) -> Result<String, String> {
    if dsn != "-" {
        return Ok(dsn);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the DSN from stdin: {e}"))?;
    let line = line.trim().to_owned();
    if line.is_empty() {
        return Err("--dsn - read an empty line from stdin".into());
    }
    Ok(line)
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        Command::Add {
            name,
            dsn,
            privacy,
            refresh_secs,
        } => {
            let dsn = match read_dsn(dsn) {
                Ok(dsn) => dsn,
                Err(message) => {
                    eprintln!("error: {message}");
                    return ExitCode::from(EXIT_INPUT);
                }
            };
            let body = PutSource {
                dsn,
                privacy: Some(privacy),
                refresh_secs: Some(refresh_secs),
            };
            match client.put_source(&name, &body).await {
                Ok(reply) => {
                    reply.print(args.remote.json, show);
                    warn(&reply.value);
                }
                Err(err) => return err.fail(),
            }
        }
        Command::Ls => match client.sources().await {
            Ok(sources) => {
                sources.print_list(args.remote.json, "no sources", &HEADER, row);
                sources.value.iter().for_each(warn);
            }
            Err(err) => return err.fail(),
        },
        Command::Rm { name } => match client.remove_source(&name).await {
            Ok(_) if args.remote.json => {
                println!("{}", output::json(&json!({"removed": name})))
            }
            Ok(_) => println!("removed {name}"),
            Err(err) => return err.fail(),
        },
        Command::Snapshot { name } => match client.snapshot_source(&name).await {
            Ok(reply) => reply.print(args.remote.json, show),
            Err(err) => return err.fail(),
        },
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use sandboxd_admin::wire::{LeftOutOut, SnapshotOut, SnapshotSummaryOut};

    use super::*;

    fn source(summary: Option<SnapshotSummaryOut>) -> SourceOut {
        SourceOut {
            name: "shop".into(),
            privacy: "no-values".into(),
            refresh_secs: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            last_attempt_at_ms: None,
            last_error: None,
            snapshot: Some(SnapshotOut {
                taken_at_ms: 0,
                server_version: "PostgreSQL 18.1".into(),
                took_ms: 10,
                summary,
            }),
            tls: None,
        }
    }

    #[test]
    fn the_holds_column_counts_tables_statistics_and_what_was_left_out() {
        let summary = SnapshotSummaryOut {
            tables: 12,
            partitioned_tables: 0,
            indexes: 20,
            expression_indexes: 1,
            materialized_views: 0,
            column_statistics: 30,
            extended_statistics: 1,
            settings: 40,
            extensions: 0,
            left_out: vec![
                LeftOutOut {
                    what: "extended statistics (1)".into(),
                    why: "cannot restore".into(),
                },
                LeftOutOut {
                    what: "sample values".into(),
                    why: "no-values".into(),
                },
            ],
        };
        let row = row(&source(Some(summary)));
        assert_eq!(row.len(), HEADER.len());
        assert_eq!(row[4], "12 tables, 30 stats rows, 2 left out");
        assert_eq!(
            holds_text(&source(None)),
            "not recorded (snapshot again)",
            "a snapshot stored before summaries"
        );
    }
}
