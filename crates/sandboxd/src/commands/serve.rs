//! `sandboxd serve`: the daemon. MCP for agents at `/mcp`, the admin API under `/v1`, the panel
//! at `/`, `/metrics`; the janitor and the MCP session sweeper on their tick. Stops on
//! SIGINT/SIGTERM; sandboxes stay up and are adopted by the next start. An operator's restart
//! (`sandboxd restart`, `POST /v1/restart`, the panel) stops the same way, then re-executes the
//! binary in place: same pid, arguments, environment and address.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::daemon::{self, Daemon};
use crate::http;

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

/// Binds `listen`. After a restart the address is the one the previous image had; its socket
/// was closed a moment ago, so a refusal is tried again for a few seconds.
async fn bind(listen: &str, restarted: bool) -> std::io::Result<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(listen).await {
            Err(err)
                if restarted
                    && err.kind() == std::io::ErrorKind::AddrInUse
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bound => return bound,
        }
    }
}

/// The start-up line on stderr: where everything is, and what rules the master switch.
async fn announce(daemon: &Daemon, settings: &Settings, addr: SocketAddr, restarted: bool) {
    let images = if daemon.images.is_empty() {
        String::new()
    } else {
        format!(" (images {})", daemon.images.join(", "))
    };
    let switch = match daemon.broker.settings().await {
        Ok(view) => match view.override_text() {
            Some(text) => format!(
                "{} ({text} in the environment overrides the stored {})",
                on_off(view.sandbox_db_enabled_running),
                on_off(view.sandbox_db_enabled_stored)
            ),
            None => format!("{} (stored)", on_off(view.sandbox_db_enabled_running)),
        },
        Err(err) => format!("unknown ({err})"),
    };
    eprintln!(
        "sandboxd{}: {} backend{images}; MCP at http://{addr}/mcp, panel at http://{addr}/, admin \
         API at http://{addr}/v1 (token: {} or ${}); sandbox_db_enabled running = {switch}",
        if restarted { " restarted in place" } else { "" },
        daemon.primary,
        settings.admin_token_file().display(),
        daemon::ADMIN_TOKEN_ENV,
    );
}

fn on_off(value: bool) -> &'static str {
    if value { "on" } else { "off" }
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    // Set only in an image re-executed by a restart: the address its predecessor listened on,
    // so a daemon started on port 0 comes back on the same port.
    let restarted_on = std::env::var(daemon::RESTART_LISTEN_ENV).ok();
    let restarted = restarted_on.is_some();
    let inherited = if restarted {
        daemon::inherited_children()
    } else {
        Vec::new()
    };
    let daemon = match daemon::start(settings).await {
        Ok(daemon) => daemon,
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let listen = restarted_on
        .or(args.listen)
        .unwrap_or_else(|| settings.server.listen.clone());
    let listener = match bind(&listen, restarted).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("error: cannot listen on {listen}: {err}");
            // The broker's start audited its reconciliation and janitor pass.
            daemon.broker.stop_audit().await;
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("error: {err}");
            daemon.broker.stop_audit().await;
            return ExitCode::FAILURE;
        }
    };
    let shutdown = CancellationToken::new();
    let restart = daemon.broker.restart_requested();
    let janitor = daemon.broker.spawn_janitor(shutdown.child_token());
    let sweeper = daemon.broker.spawn_session_sweeper(shutdown.child_token());
    let pools = daemon.broker.spawn_pools(shutdown.child_token());
    let probes = daemon.broker.spawn_feature_probes(shutdown.child_token());
    let refresher = daemon.broker.spawn_source_refresher(shutdown.child_token());
    let reaper = daemon::spawn_reaper(inherited, shutdown.child_token());
    let app = http::app(&daemon, settings, shutdown.child_token());
    // The first stdout line is the address: scripts and tests read it. Whoever read it may
    // have closed the pipe since (a restarted image writes it again): not worth dying for.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "sandboxd listening on http://{addr}").and_then(|()| stdout.flush());
    announce(&daemon, settings, addr, restarted).await;
    let server_shutdown = shutdown.clone();
    let restart_requested = restart.clone();
    // The peer address rides with each request: the panel login's rate limit is per client.
    http::serve(
        listener,
        app,
        http::connection_limits(settings),
        async move {
            tokio::select! {
                _ = stop_signal() => tracing::info!("stopping"),
                _ = server_shutdown.cancelled() => tracing::info!("stopping"),
                _ = restart_requested.cancelled() => {
                    tracing::info!("restarting: draining, then re-executing in place");
                }
            }
            // Ends the MCP streams too, so open agent connections do not hold the shutdown.
            server_shutdown.cancel();
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
    if let Err(err) = reaper.await {
        tracing::error!(error = %err, "the reaper of a previous image's children failed");
    }
    daemon.broker.sweep_at_stop().await;
    // Last: every task above audits, and a row queued by them is written before the process
    // ends or re-executes.
    daemon.broker.stop_audit().await;
    tracing::info!("audit writer stopped");
    if !restart.is_cancelled() {
        return ExitCode::SUCCESS;
    }
    // The listener is closed (dropped by `serve`), and every other descriptor is close-on-exec.
    drop(daemon);
    let err = daemon::reexec(addr);
    eprintln!("error: restarting failed, so sandboxd stops instead: {err}");
    ExitCode::FAILURE
}
