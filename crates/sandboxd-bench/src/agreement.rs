//! Clone plan agreement per data set (issue 32): each of the testkit's clone data sets (the shop,
//! the wide one) loaded into a "production" of its own (a plain `docker run` of the PostgreSQL 18
//! image with production's server flags, as the clone tests start it, labeled with the bench's
//! pid so the sweep removes it), then per data set: the plan shapes of its queries on a
//! keep-values and on a no-values clone against production's, each miss named with its reason
//! (the data set's known misses; on the no-values clone, the stripped sample values; anything
//! else is "not explained"), and the snapshot's time and a cold clone's hand-out latency over
//! `runs` runs after one untimed round.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sandboxd_backend::clone::{Fidelity, provision_clone, read_source};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest};
use sandboxd_domain::clone::{Privacy, Snapshot};
use sandboxd_domain::{EngineRef, Instance, generate_secret};
use sandboxd_testkit::clone_fixtures::{
    Agreement, DataSet, FINISH, PRODUCTION_FLAGS, SHOP, WIDE, plan_shapes,
};
use secrecy::{ExposeSecret, SecretString};
use tokio::process::Command;
use tokio_postgres::{Client, NoTls};

use crate::cleanup::{BENCH_LABEL, Cleanup};
use crate::clones::timed_snapshots;
use crate::stats::{Check, Measure, Report, Series};

const IMAGE: &str = "sandboxd-local/postgres:18";
/// The database production's data sets load into (the clone tests' name for it).
const DATABASE: &str = "shop";
/// Plans a keep-values clone must agree on (issue 32's target).
const TARGET: f64 = 0.95;

/// Both data sets, one production at a time. `request` makes the clones' requests.
pub async fn plan_agreement(
    docker: &DockerBackend,
    postgres: EngineRef,
    request: impl Fn(&str) -> Result<InstanceRequest>,
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    for set in [SHOP, WIDE] {
        let production = Production::start(set.name, cleanup).await?;
        let outcome = measure(docker, postgres, &request, &production, set, runs, report).await;
        production.remove().await;
        outcome.with_context(|| format!("the {} data set", set.name))?;
    }
    Ok(())
}

async fn measure(
    docker: &DockerBackend,
    postgres: EngineRef,
    request: &impl Fn(&str) -> Result<InstanceRequest>,
    production: &Production,
    set: DataSet,
    runs: usize,
    report: &mut Report,
) -> Result<()> {
    let loaded = Instant::now();
    production.load(set.load).await?;
    eprintln!(
        "clones: the {} data set loaded in {:.1} s",
        set.name,
        loaded.elapsed().as_secs_f64()
    );
    let dsn = production.dsn();
    let (snapshot, snapshots) = timed_snapshots(docker, postgres, set.name, &dsn, runs).await?;
    let private = {
        let mut private = read_source(set.name, &dsn, Privacy::NoValues)
            .await
            .context("a no-values snapshot")?;
        private.schema_sql = snapshot.schema_sql.clone();
        private
    };

    let on_production = plan_shapes(&production.superuser().await?, set.queries)
        .await
        .map_err(anyhow::Error::msg)?;
    let tag = format!("agree-{}", set.name);
    let on_clone = clone_shapes(docker, request(&tag)?, &snapshot, set.queries).await?;
    let on_private = clone_shapes(docker, request(&tag)?, &private, set.queries).await?;
    let kept = Agreement::compare(set.queries, &on_production, &on_clone, set.known_misses);
    let stripped = Agreement::compare(set.queries, &on_production, &on_private, set.known_misses);

    let mut handed = Vec::with_capacity(runs);
    for round in 0..=runs {
        let request = request(&format!("{tag}-{round}"))?;
        let started = Instant::now();
        let (clone, _) = provision_clone(docker, &request, &snapshot, Fidelity::FULL)
            .await
            .context("clone")?;
        let took = started.elapsed();
        docker.teardown(&InstanceHandle::of(&clone)).await?;
        if round > 0 {
            handed.push(took);
        }
    }

    let subject = format!(
        "postgres 18, {} data set ({} queries)",
        set.name,
        set.queries.len()
    );
    report.series.push(Series::from_samples(
        "docker: snapshot of a production (keep-values)",
        &subject,
        snapshots,
    ));
    report.series.push(Series::from_samples(
        "docker: clone hand-out (cold) of that snapshot",
        &subject,
        handed,
    ));
    for (privacy, agreement) in [("keep-values", &kept), ("no-values", &stripped)] {
        report.measures.push(Measure {
            subject: format!("clone plan agreement, {} data set, {privacy}", set.name),
            value: agreement.rate() * 100.0,
            unit: "%".into(),
            note: format!(
                "{} plans equal to production's; {} of the misses named as known",
                agreement.summary(),
                agreement.misses.len() - agreement.unexplained().len()
            ),
        });
        for miss in &agreement.misses {
            report.notes.push(format!(
                "clone plan miss, {} data set, {privacy}, query {}: `{}`: {}",
                set.name,
                miss.number,
                miss.query,
                miss.reason.unwrap_or(match privacy {
                    "no-values" => "no-values: most common values and histograms stripped",
                    _ => "not explained (no known miss names it)",
                })
            ));
        }
    }
    let named = kept.misses.len() - kept.unexplained().len();
    let others = set.queries.len() - named;
    let others_agreed = if others == 0 {
        1.0
    } else {
        kept.agreed() as f64 / others as f64
    };
    report.checks.push(Check {
        target: format!(
            "{} data set: a keep-values clone plans ≥ {:.0} % of the queries as production does",
            set.name,
            TARGET * 100.0
        ),
        holds: kept.rate() >= TARGET,
        measured: format!(
            "{}; {:.1} % without the {named} misses named as known",
            kept.summary(),
            others_agreed * 100.0
        ),
    });
    Ok(())
}

/// The plan shapes of `queries` on a clone of `snapshot`, asked as its agent; the clone removed.
async fn clone_shapes(
    docker: &DockerBackend,
    request: InstanceRequest,
    snapshot: &Snapshot,
    queries: &[&str],
) -> Result<Vec<String>> {
    let (clone, _) = provision_clone(docker, &request, snapshot, Fidelity::FULL)
        .await
        .context("clone")?;
    let shapes = match connect_agent(&clone).await {
        Ok(client) => plan_shapes(&client, queries)
            .await
            .map_err(anyhow::Error::msg),
        Err(err) => Err(err),
    };
    docker.teardown(&InstanceHandle::of(&clone)).await?;
    shapes
}

/// The clone's handed-out account, as an agent connects.
async fn connect_agent(instance: &Instance) -> Result<Client> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&instance.host)
        .port(instance.port)
        .user(&instance.agent.user)
        .password(instance.agent.password.expose_secret())
        .dbname(&instance.database);
    let (client, connection) = config.connect(NoTls).await.context("the clone's account")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A "production": the PostgreSQL 18 image run as anyone would, published on loopback.
struct Production {
    name: String,
    port: u16,
    password: SecretString,
}

impl Production {
    async fn start(set: &str, cleanup: &Cleanup) -> Result<Self> {
        let name = format!("sandboxd-bench-production-{set}-{}", cleanup.pid());
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let password = generate_secret();
        // `-e KEY` takes the value from the docker CLI's environment: on no command line.
        let out = Command::new("docker")
            .args(["run", "-d", "--name", &name, "--label"])
            .arg(format!("{BENCH_LABEL}={}", cleanup.pid()))
            .arg("-p")
            .arg(format!("127.0.0.1:{port}:5432"))
            .args(["-e", "POSTGRES_PASSWORD", "-e"])
            .arg(format!("POSTGRES_DB={DATABASE}"))
            .env("POSTGRES_PASSWORD", password.expose_secret())
            .args([IMAGE, "postgres"])
            .args(PRODUCTION_FLAGS)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("docker run")?;
        if !out.status.success() {
            bail!(
                "docker run {IMAGE}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let production = Self {
            name,
            port,
            password,
        };
        // The image answers on its socket before the password is set: wait for a TCP login.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match production.superuser().await {
                Ok(client) if client.simple_query("SELECT 1").await.is_ok() => break,
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => {
                    production.remove().await;
                    bail!("production did not accept a login within 90 s");
                }
            }
        }
        Ok(production)
    }

    async fn superuser(&self) -> Result<Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .password(self.password.expose_secret())
            .dbname(DATABASE);
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Loads `load`, then what the clone tests' production runs after it.
    async fn load(&self, load: &str) -> Result<()> {
        let client = self.superuser().await?;
        client.batch_execute(load).await.context("loading")?;
        for statement in FINISH {
            client.batch_execute(statement).await.context(*statement)?;
        }
        client
            .batch_execute(&format!("ALTER DATABASE {DATABASE} SET work_mem = '24MB'"))
            .await
            .context("production's work_mem")?;
        Ok(())
    }

    /// The snapshot reads as the superuser (read-only by the snapshot's own session settings).
    fn dsn(&self) -> SecretString {
        SecretString::from(format!(
            "host=127.0.0.1 port={} user=postgres password={} dbname={DATABASE} sslmode=disable",
            self.port,
            self.password.expose_secret()
        ))
    }

    async fn remove(&self) {
        let removed = Command::new("docker")
            .args(["rm", "-f", "-v", &self.name])
            .output()
            .await;
        if !matches!(&removed, Ok(out) if out.status.success()) {
            eprintln!("removing {}: {removed:?}", self.name);
        }
    }
}
