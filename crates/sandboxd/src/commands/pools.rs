//! `sandboxd pools [set POOL --min-idle N [--max-total M]]`: the running daemon's warm pools,
//! and their sizes. `set` resizes a pool, or adds it when there is none of that name: stored, it
//! applies at once and at every start, where it wins over the config file's `[pools.<engine>]`
//! (`[pools."<engine>@<source>"]` for clones).

use std::process::ExitCode;

use sandboxd_admin::wire::{PoolOut, PutPool};

use crate::client::{AdminClient, Remote};
use crate::config::Settings;
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
    /// Resize a warm pool, or add it when there is none (stored: kept across restarts, where
    /// it wins over the config file's).
    Set {
        /// An engine (`postgres`), or `<engine>@<source>` for a pool of clones.
        pool: String,
        /// Idle members kept ready.
        #[arg(long)]
        min_idle: usize,
        /// Most members held at once, idle or starting [default: the pool's, raised to
        /// --min-idle; for a new pool 4, or --min-idle when more]
        #[arg(long)]
        max_total: Option<usize>,
    },
}

/// `ready`, `filling`, or `backing off (3 failures, next try in 4 s): <cause>`.
pub fn state_of(pool: &PoolOut) -> String {
    if let (Some(source), None) = (&pool.clone_of, pool.snapshot_taken_at_ms) {
        return format!("waiting for a snapshot of {source}");
    }
    match pool.backing_off_ms {
        Some(ms) => format!(
            "backing off ({} failed start(s), next try in {} s){}",
            pool.failures,
            ms.div_ceil(1000),
            pool.last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
        None if pool.idle >= pool.min_idle => "ready".to_owned(),
        None => "filling".to_owned(),
    }
}

fn show(pools: &[PoolOut]) {
    if pools.is_empty() {
        println!(
            "no warm pool: add one with `sandboxd pools set <engine> --min-idle N`, or \
             [pools.<engine>] in the config file"
        );
        return;
    }
    let rows = pools
        .iter()
        .map(|p| {
            vec![
                p.pool.clone(),
                p.backend.clone(),
                format!("{}/{}", p.idle, p.target),
                p.starting.to_string(),
                format!("{}..{}", p.min_idle, p.max_total),
                p.handed_out.to_string(),
                p.misses.to_string(),
                p.quarantined.to_string(),
                state_of(p),
            ]
        })
        .collect();
    println!(
        "{}",
        output::table(
            &[
                "pool",
                "backend",
                "idle/target",
                "starting",
                "sizes",
                "handed out",
                "misses",
                "quarantined",
                "state",
            ],
            rows
        )
    );
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let client = match AdminClient::new(&args.remote, settings) {
        Ok(client) => client,
        Err(err) => return err.fail(),
    };
    match args.command {
        None => match client.pools().await {
            Ok(reply) => reply.print(args.remote.json, |pools| show(pools)),
            Err(err) => return err.fail(),
        },
        Some(Command::Set {
            pool,
            min_idle,
            max_total,
        }) => {
            let existed = match client.pools().await {
                Ok(reply) => reply.value.iter().any(|p| p.pool == pool),
                Err(err) => return err.fail(),
            };
            let body = PutPool {
                min_idle,
                max_total,
            };
            match client.resize_pool(&pool, &body).await {
                Ok(reply) => reply.print(args.remote.json, |out| {
                    if !existed {
                        println!(
                            "added the warm pool {} (stored: it is filled now and at every start)",
                            out.pool
                        );
                    }
                    show(std::slice::from_ref(out))
                }),
                Err(err) => return err.fail(),
            }
        }
    }
    ExitCode::SUCCESS
}
