//! `sandboxd demo`: provisions every engine the chosen backend can run (postgres, redis and
//! mariadb on a machine set up by `scripts/install-deps.sh`) for the owner `demo`, runs a real
//! write-then-read query on each with the returned credentials through the servers' own
//! command-line clients (credentials passed in their environment, never argv), and tears
//! everything down.

use std::process::{ExitCode, Stdio};

use sandboxd_backend::{InstanceHandle, InstanceRequest, Sweep, teardown_all};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef, Protocol, ServiceEvidence, engines};
use secrecy::ExposeSecret;

use crate::backends;
use crate::config::Settings;
use crate::output;

use super::BackendArg;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub backend: BackendArg,
}

pub async fn run(args: Args, settings: &Settings) -> ExitCode {
    let owner = AgentSlug::parse("demo").expect("a constant valid slug");
    let (progress, bar) = output::progress();
    let wanted: Vec<EngineRef> = engines::all().collect();
    let choice = args.backend.choice(settings);
    let backend = match backends::choose(settings, choice, &wanted, progress.clone()).await {
        Ok(b) => b,
        Err(err) => return super::fail(&err),
    };
    let mut engines = Vec::new();
    for engine in wanted {
        match backend.supports(engine).await {
            Ok(()) => engines.push(engine),
            Err(why) => eprintln!("skipping {engine}: {why}"),
        }
    }
    let requests: Vec<InstanceRequest> = engines
        .iter()
        .map(|engine| InstanceRequest {
            major: None,
            engine: *engine,
            owner: owner.clone(),
            maker: DaemonId::cli(),
            features: Default::default(),
            size: None,
        })
        .collect();
    let started = std::time::Instant::now();
    let provisioned = super::provision_shown(backend.as_ref(), &requests, &progress, bar).await;
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
        match query(instance.engine.protocol, &evidence).await {
            Ok(answer) => println!("{}: {answer}", evidence.service),
            Err(err) => {
                ok = false;
                eprintln!("{}: query failed: {err}", evidence.service);
            }
        }
    }
    teardown_all(backend.as_ref(), instances.iter().map(InstanceHandle::of)).await;
    // Other `sandboxd provision` instances may still use the CLI's network: sweep leaves it then.
    if let Err(err) = backend.sweep(&DaemonId::cli(), Sweep::Now).await {
        eprintln!("warning: sweeping the {} backend: {err}", backend.kind());
    }
    println!("torn down");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs a small write-then-read round trip with the server's CLI client.
async fn query(protocol: Protocol, service: &ServiceEvidence) -> Result<String, String> {
    let password = service.password.expose_secret();
    let port = service.port.to_string();
    let mut cmd = match protocol {
        Protocol::Postgres => {
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
                "INSERT INTO demo VALUES (1, 'hello from ' || current_user)",
                "-c",
                "SELECT note || ' (' || version() || ')' FROM demo",
            ])
            .env("PGPASSWORD", password);
            cmd
        }
        Protocol::Redis => {
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
        Protocol::Mysql => {
            let mut cmd = tokio::process::Command::new("mysql");
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
                     INSERT INTO demo VALUES (1, CONCAT('hello from ', CURRENT_USER())); \
                     SELECT CONCAT(note, ' (', VERSION(), ')') FROM demo",
            ])
            .env("MYSQL_PWD", password);
            cmd
        }
        Protocol::Mongo => {
            let mut cmd = tokio::process::Command::new("mongosh");
            cmd.args(["--quiet", "--nodb", "--eval"])
                .arg(
                    "const d = connect(process.env.SANDBOX_URL).getSiblingDB(process.env.SANDBOX_DB); \
                     d.demo.insertOne({_id: 1, note: 'hello from ' + process.env.SANDBOX_USER}); \
                     print(d.demo.findOne({_id: 1}).note)",
                )
                .env("SANDBOX_URL", service.url.expose_secret())
                .env("SANDBOX_DB", &service.database)
                .env("SANDBOX_USER", &service.user);
            cmd
        }
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
