//! `sandboxd demo`: the main job until the daemon lands. Provisions postgres, redis and mariadb
//! for the owner `demo`, runs a real query on each with the returned credentials through the
//! servers' own command-line clients (credentials passed in their environment, never argv), and
//! tears everything down.

use std::process::{ExitCode, Stdio};

use sandboxd_backend::{InstanceHandle, InstanceRequest, provision_set, teardown_all};
use sandboxd_domain::{AgentSlug, EngineRef, ServiceEvidence};
use secrecy::ExposeSecret;

use crate::backends;
use crate::cli::BackendArg;
use crate::config::Settings;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub backend: BackendArg,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let owner = AgentSlug::parse("demo").expect("a constant valid slug");
    let engines: Vec<EngineRef> = ["postgres", "redis", "mariadb"]
        .iter()
        .map(|n| EngineRef::parse(n).expect("registered engines"))
        .collect();
    let (progress, bar) = output::progress();
    let backend = match backends::choose(
        settings,
        args.backend.choice(settings),
        &engines,
        progress.clone(),
    )
    .await
    {
        Ok(b) => b,
        Err(err) => return super::fail(&err),
    };
    progress(&format!(
        "provisioning postgres, redis, mariadb on the {} backend…",
        backend.kind()
    ));
    let started = std::time::Instant::now();
    let requests: Vec<InstanceRequest> = engines
        .iter()
        .map(|engine| InstanceRequest {
            engine: *engine,
            owner: owner.clone(),
            features: Default::default(),
        })
        .collect();
    let provisioned = provision_set(backend.as_ref(), &requests).await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let instances = match provisioned {
        Ok(instances) => instances,
        Err(err) => return super::fail(&err),
    };
    println!(
        "provisioned {} instances in {} ms",
        instances.len(),
        started.elapsed().as_millis()
    );
    let mut ok = true;
    for instance in &instances {
        let evidence = instance.evidence(&settings.env_prefix);
        match query(&evidence).await {
            Ok(answer) => println!("{}: {answer}", evidence.service),
            Err(err) => {
                ok = false;
                eprintln!("{}: query failed: {err}", evidence.service);
            }
        }
    }
    teardown_all(backend.as_ref(), instances.iter().map(InstanceHandle::of)).await;
    println!("torn down");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs a small write-then-read round trip with the server's CLI client.
async fn query(service: &ServiceEvidence) -> Result<String, String> {
    let password = service.password.expose_secret();
    let port = service.port.to_string();
    let mut cmd = match service.service {
        "postgres" => {
            let mut cmd = tokio::process::Command::new("psql");
            cmd.args([
                "-X",
                "-qAt",
                "-h",
                &service.host,
                "-p",
                &port,
                "-U",
                &service.user,
                "-d",
            ])
            .arg(&service.database)
            .args([
                "-c",
                "CREATE TABLE demo(id int primary key, note text)",
                "-c",
                "INSERT INTO demo VALUES (1, 'hello from postgres')",
                "-c",
                "SELECT note || ' (' || version() || ')' FROM demo",
            ])
            .env("PGPASSWORD", password);
            cmd
        }
        "redis" => {
            let mut cmd = tokio::process::Command::new("redis-cli");
            cmd.args([
                "-h",
                &service.host,
                "-p",
                &port,
                "--user",
                &service.user,
                "--no-auth-warning",
            ])
            .args([
                "EVAL",
                "redis.call('SET','demo','hello from redis'); return redis.call('GET','demo')",
                "0",
            ])
            .env("REDISCLI_AUTH", password);
            cmd
        }
        "mariadb" => {
            let mut cmd = tokio::process::Command::new("mariadb");
            cmd.args([
                "--protocol=TCP",
                "-h",
                &service.host,
                "-P",
                &port,
                "-u",
                &service.user,
                "-N",
                "-B",
            ])
            .arg(&service.database)
            .args([
                "-e",
                "CREATE TABLE demo(id INT PRIMARY KEY, note TEXT); \
                     INSERT INTO demo VALUES (1, 'hello from mariadb'); \
                     SELECT CONCAT(note, ' (', VERSION(), ')') FROM demo",
            ])
            .env("MYSQL_PWD", password);
            cmd
        }
        other => return Err(format!("the demo has no client for {other}")),
    };
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("running the client: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}
