//! `sandboxd serve`: the daemon. MCP for agents at `/mcp`, the admin API under `/v1`, the panel
//! at `/`, `/metrics`; the janitor and the MCP session sweeper on their tick. Stops on SIGINT/SIGTERM; sandboxes stay up and
//! are adopted by the next start.

use std::process::ExitCode;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::{daemon, http};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (overrides `server.listen`; port 0 picks a free one).
    #[arg(long)]
    pub listen: Option<String>,
}

async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let daemon = match daemon::start(settings).await {
        Ok(daemon) => daemon,
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let listen = args
        .listen
        .unwrap_or_else(|| settings.server.listen.clone());
    let listener = match TcpListener::bind(&listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("error: cannot listen on {listen}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = CancellationToken::new();
    let janitor = daemon.broker.spawn_janitor(shutdown.child_token());
    let sweeper = daemon.broker.spawn_session_sweeper(shutdown.child_token());
    let pools = daemon.broker.spawn_pools(shutdown.child_token());
    let probes = daemon.broker.spawn_feature_probes(shutdown.child_token());
    let refresher = daemon.broker.spawn_source_refresher(shutdown.child_token());
    let app = http::app(&daemon, settings, shutdown.child_token());
    // The first stdout line is the address: scripts and tests read it.
    println!("sandboxd listening on http://{addr}");
    let images = if daemon.images.is_empty() {
        String::new()
    } else {
        format!(" (images {})", daemon.images.join(", "))
    };
    eprintln!(
        "sandboxd: {} backend{images}; MCP at http://{addr}/mcp, panel at http://{addr}/, admin API at \
         http://{addr}/v1 (token: {} or ${}); sandbox_db_enabled running = {}",
        daemon.primary,
        settings.admin_token_file().display(),
        daemon::ADMIN_TOKEN_ENV,
        daemon
            .broker
            .settings()
            .await
            .map(|s| s.sandbox_db_enabled_running)
            .unwrap_or(false),
    );
    let server_shutdown = shutdown.clone();
    // The peer address rides with each request: the panel login's rate limit is per client.
    http::serve(
        listener,
        app,
        http::connection_limits(settings),
        async move {
            tokio::select! {
                _ = stop_signal() => {}
                _ = server_shutdown.cancelled() => {}
            }
            // Ends the MCP streams too, so open agent connections do not hold the shutdown.
            server_shutdown.cancel();
            tracing::info!("stopping");
        },
    )
    .await;
    shutdown.cancel();
    tracing::info!("http server stopped");
    match janitor.await {
        Ok(()) => tracing::info!("janitor stopped"),
        Err(err) => tracing::error!(error = %err, "janitor task failed"),
    }
    match refresher.await {
        Ok(()) => tracing::info!("source refresher stopped"),
        Err(err) => tracing::error!(error = %err, "source refresher failed"),
    }
    match sweeper.await {
        Ok(()) => tracing::info!("MCP session sweeper stopped"),
        Err(err) => tracing::error!(error = %err, "MCP session sweeper failed"),
    }
    match pools.await {
        Ok(()) => tracing::info!("warm pools drained"),
        Err(err) => tracing::error!(error = %err, "warm pool task failed"),
    }
    if let Err(err) = probes.await {
        tracing::error!(error = %err, "feature probe task failed");
    }
    daemon.broker.sweep_at_stop().await;
    ExitCode::SUCCESS
}
