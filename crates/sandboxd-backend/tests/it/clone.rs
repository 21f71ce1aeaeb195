//! Production-faithful clones (§7) on Docker: a real PostgreSQL "production" (a container of
//! its own, loaded with the testkit's `clone_fixtures::shop`), snapshotted read-only by a role
//! that may read but not write, and cloned. Each query's plan shape on the clone, on an empty
//! schema-only copy and on a clone under privacy mode is compared with production's, and the
//! report says how often each agrees.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use sandboxd_backend::clone::{
    CloneReport, Fidelity, SchemaOwner, apply, provision_clone, read_source,
};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::clone::{Privacy, Snapshot};
use sandboxd_domain::{AgentSlug, Instance, generate_secret};
use sandboxd_testkit::clone_fixtures::shop::{FINISH, LOAD, QUERIES};
use sandboxd_testkit::clone_fixtures::{PRODUCTION_FLAGS, explain, plan_shapes};
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::docker::{Harness, POSTGRES, POSTGRES18, harness_owner, test_ulimits};
use crate::support::{self, engine, request};

const NS: &str = "sandboxd";
pub(super) const READER: &str = "snapshot_reader";

/// A "production" server: a plain container of the image (no tmpfs, no sandbox hardening), on
/// the default bridge, labeled with a test owner so the harness removes it whatever happens.
pub(super) struct Production {
    id: String,
    pub(super) host: String,
    superuser_password: SecretString,
    pub(super) reader_password: SecretString,
}

/// A server certificate and its key (PEM) that production can turn TLS on with.
pub(super) struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Where production's certificate and key are written, by the container's own entrypoint.
pub(super) const TLS_DIR: &str = "/tmp/sandboxd-test-tls";

impl Production {
    pub(super) async fn start(docker: &Docker, image: &str, owner: &AgentSlug) -> Self {
        Self::start_with(docker, image, owner, None).await
    }

    /// With `tls`, its certificate and key are written under [`TLS_DIR`] as the server starts
    /// (TLS stays off until [`Production::enable_tls`]).
    pub(super) async fn start_with(
        docker: &Docker,
        image: &str,
        owner: &AgentSlug,
        tls: Option<&ServerTls>,
    ) -> Self {
        let superuser_password = generate_secret();
        let mut env = vec![
            format!("POSTGRES_PASSWORD={}", superuser_password.expose_secret()),
            "POSTGRES_DB=shop".to_owned(),
        ];
        let mut entrypoint = None;
        if let Some(tls) = tls {
            env.push(format!("TEST_TLS_CERT={}", tls.cert_pem));
            env.push(format!("TEST_TLS_KEY={}", tls.key_pem));
            // The server reads its key only when it is its own user's and private.
            let script = format!(
                "umask 077; mkdir -p {TLS_DIR}; \
                 printf '%s\\n' \"$TEST_TLS_CERT\" > {TLS_DIR}/server.crt; \
                 printf '%s\\n' \"$TEST_TLS_KEY\" > {TLS_DIR}/server.key; \
                 if [ \"$(id -u)\" = 0 ]; then chown -R postgres {TLS_DIR}; fi; \
                 exec docker-entrypoint.sh \"$@\""
            );
            entrypoint = Some(vec![
                "sh".to_owned(),
                "-c".to_owned(),
                script,
                "sh".to_owned(),
            ]);
        }
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            env: Some(env),
            entrypoint,
            cmd: Some(
                std::iter::once("postgres")
                    .chain(PRODUCTION_FLAGS.iter().copied())
                    .map(str::to_owned)
                    .collect(),
            ),
            labels: Some(HashMap::from([
                (format!("{NS}.sandbox"), "1".to_owned()),
                (format!("{NS}.owner"), owner.to_string()),
            ])),
            host_config: Some(HostConfig {
                ulimits: Some(test_ulimits()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let id = docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .expect("create the production container")
            .id;
        docker
            .start_container(&id, None)
            .await
            .expect("start the production container");
        let inspected = docker
            .inspect_container(&id, None)
            .await
            .expect("inspect the production container");
        let host = inspected
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|n| n.get("bridge").and_then(|b| b.ip_address.clone()))
            .filter(|ip| !ip.is_empty())
            .expect("production has a bridge address");
        let production = Self {
            id,
            host,
            superuser_password,
            reader_password: generate_secret(),
        };
        // The image answers on its socket before the password is set: wait for a TCP login.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match production.superuser().await {
                Ok(client) if client.simple_query("SELECT 1").await.is_ok() => break,
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(_) | Err(_) => panic!("production did not accept a login within 90 s"),
            }
        }
        production
    }

    /// Turns TLS on with the certificate written at start (a reload: new sessions get it),
    /// and waits until a new session sees it on.
    pub(super) async fn enable_tls(&self) {
        let client = self.superuser().await.expect("production superuser");
        // One statement at a time: ALTER SYSTEM refuses to run in a transaction block.
        for statement in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{TLS_DIR}/server.crt'"),
            format!("ALTER SYSTEM SET ssl_key_file = '{TLS_DIR}/server.key'"),
            "ALTER SYSTEM SET ssl = on".to_owned(),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            client
                .batch_execute(&statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let fresh = self.superuser().await.expect("production superuser");
            if one_value(&fresh, "SHOW ssl").await == "on" {
                break;
            }
            assert!(Instant::now() < deadline, "TLS on within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) async fn superuser(&self) -> Result<Client, tokio_postgres::Error> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(5432)
            .user("postgres")
            .password(self.superuser_password.expose_secret())
            .dbname("shop");
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Loads `load` and makes the role the snapshot reads through: it may read everything,
    /// write nothing.
    pub(super) async fn load(&self, load: &str, finish: &[&str]) {
        let started = Instant::now();
        let client = self.superuser().await.expect("production superuser");
        client.batch_execute(load).await.expect("load production");
        for statement in finish {
            client
                .batch_execute(statement)
                .await
                .expect("finish loading");
        }
        client
            .batch_execute(&format!(
                "CREATE ROLE {READER} LOGIN PASSWORD '{}' IN ROLE pg_read_all_data; \
                 ALTER DATABASE shop SET work_mem = '24MB'",
                self.reader_password.expose_secret()
            ))
            .await
            .expect("create the snapshot role");
        eprintln!("production loaded in {} ms", started.elapsed().as_millis());
    }

    /// Gives the tables, partitions and materialized views of `public` to an owner role
    /// (`app_owner`) and makes the snapshot role a member, as README's "Clone production" asks:
    /// `pg_stats_ext` shows an object's data to its table's owner only.
    pub(super) async fn make_reader_the_tables_owner(&self) {
        let client = self.superuser().await.expect("production superuser");
        client
            .batch_execute(&format!(
                "CREATE ROLE app_owner NOLOGIN; \
                 DO $$ DECLARE r record; BEGIN \
                   FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c \
                            JOIN pg_namespace n ON n.oid = c.relnamespace \
                            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'm') LOOP \
                     EXECUTE format('ALTER %s %s OWNER TO app_owner', \
                       CASE r.relkind WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END, r.rel); \
                   END LOOP; END $$; \
                 GRANT app_owner TO {READER}"
            ))
            .await
            .expect("the snapshot role gets the owner's privileges");
    }

    pub(super) fn reader_dsn(&self) -> SecretString {
        self.dsn_with(self.reader_password.expose_secret())
    }

    /// Production has no TLS here, and its bridge address is not loopback (where sandboxd
    /// verifies by default): the DSN says so.
    fn dsn_with(&self, password: &str) -> SecretString {
        SecretString::from(format!(
            "host={} port=5432 user={READER} password={password} dbname=shop sslmode=disable",
            self.host
        ))
    }

    pub(super) async fn remove(self, docker: &Docker) {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..RemoveContainerOptions::default()
        };
        docker
            .remove_container(&self.id, Some(options))
            .await
            .expect("remove production");
    }
}

/// Each query's plan shape on the server `client` is connected to.
pub(super) async fn shapes(client: &Client, queries: &[&str]) -> Vec<String> {
    plan_shapes(client, queries)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn agreement(production: &[String], other: &[String]) -> f64 {
    let same = production.iter().zip(other).filter(|(a, b)| a == b).count();
    same as f64 / production.len() as f64
}

/// The estimated rows of the query's top plan node.
pub(super) async fn estimated_rows(client: &Client, query: &str) -> f64 {
    let json = explain(client, query)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    json[0]["Plan"]["Plan Rows"].as_f64().expect("Plan Rows")
}

/// [`estimated_rows`] of each query.
pub(super) async fn estimates(client: &Client, queries: &[&str]) -> Vec<f64> {
    let mut out = Vec::with_capacity(queries.len());
    for query in queries {
        out.push(estimated_rows(client, query).await);
    }
    out
}

pub(super) async fn agent(instance: &Instance) -> Client {
    support::pg_connect(instance, instance.agent.password.expose_secret())
        .await
        .expect("the agent's account logs into the clone")
}

pub(super) async fn one_value(client: &Client, sql: &str) -> String {
    let answers = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    answers
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("NULL").to_owned()),
            _ => None,
        })
        .expect("a row")
}

pub(super) async fn remove(backend: &DockerBackend, instance: &Instance) {
    backend
        .teardown(&InstanceHandle::of(instance))
        .await
        .expect("teardown");
}

/// A clone of `snapshot` for a new owner of the test `tag`.
pub(super) async fn clone_of(
    backend: &DockerBackend,
    tag: &str,
    snapshot: &Snapshot,
    fidelity: Fidelity,
) -> (Instance, CloneReport) {
    let started = Instant::now();
    let owner = harness_owner(tag);
    let made = provision_clone(
        backend,
        &request("postgres", &owner, &[]),
        snapshot,
        fidelity,
    )
    .await
    .unwrap_or_else(|e| panic!("clone of {}: {e}", snapshot.source));
    eprintln!(
        "clone {:?} handed out in {} ms ({} ms making it a clone)",
        fidelity,
        started.elapsed().as_millis(),
        made.1.took.as_millis()
    );
    made
}

pub(super) fn assert_secret_absent(what: &str, text: &str, secrets: &[&SecretString]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.expose_secret()),
            "{what} quotes a production password: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_of_postgres_18_plans_like_production_and_an_empty_copy_does_not() {
    const TAG: &str = "clone18";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES18, &owner).await;
            production.load(LOAD, FINISH).await;
            let dsn = production.reader_dsn();
            let secrets = [&production.reader_password, &production.superuser_password];

            let started = Instant::now();
            let snapshot = sandboxd_backend::clone::take_snapshot(
                &*backend,
                engine("postgres"),
                "shop",
                &dsn,
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of production");
            eprintln!(
                "snapshot taken in {} ms: {} relations, {} column statistics, {} settings",
                started.elapsed().as_millis(),
                snapshot.relations.len(),
                snapshot.columns.len(),
                snapshot.settings.len()
            );
            assert_eq!(snapshot.major(), 18);
            let orders = snapshot
                .relations
                .iter()
                .find(|r| r.name == "orders")
                .expect("orders in the snapshot");
            assert!(orders.relpages > 1000, "{orders:?}");
            assert!(snapshot.columns.iter().any(|c| c.table == "orders"
                && c.column == "status"
                && c.most_common_vals.is_some()));
            let setting = |name: &str| {
                snapshot
                    .settings
                    .iter()
                    .find(|s| s.name == name)
                    .map(|s| s.value.clone())
            };
            assert_eq!(setting("random_page_cost").as_deref(), Some("1.1"));
            assert_eq!(setting("work_mem").as_deref(), Some("24MB"));
            assert!(
                snapshot
                    .extended_statistics
                    .iter()
                    .any(|s| s == "public.orders_status_channel"),
                "{:?}",
                snapshot.extended_statistics
            );
            assert!(snapshot.schema_sql.contains("CREATE TABLE public.orders"));
            let serialized = serde_json::to_string(&snapshot).expect("snapshot serializes");
            assert_secret_absent("the snapshot", &serialized, &secrets);
            assert!(
                !serialized.contains(&production.host),
                "the snapshot names production's address"
            );

            let on_production = {
                let client = production.superuser().await.expect("production");
                shapes(&client, QUERIES).await
            };

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            eprintln!("clone report: {report:?}");
            assert_eq!(report.statistics_refused, 0, "{report:?}");
            assert!(report.statistics_restored > 20, "{report:?}");
            assert!(report.padded_files > 10, "{report:?}");
            assert!(report.settings_applied > 10, "{report:?}");
            assert!(
                report.hypothetical_indexes,
                "hypopg in the 18 image: {report:?}"
            );
            assert!(
                report
                    .notes
                    .iter()
                    .any(|n| n.contains("orders_status_channel")),
                "the evidence says which extended statistics are not restored: {:?}",
                report.notes
            );
            let evidence = format!(
                "{clone:?} {report:?} {}",
                serde_json::to_string(&report).expect("the report serializes")
            );
            assert_secret_absent("the clone's evidence", &evidence, &secrets);

            let (empty, _) = clone_of(&backend, TAG, &snapshot, Fidelity::SCHEMA_ONLY).await;
            let on_clone = shapes(&agent(&clone).await, QUERIES).await;
            let on_empty = shapes(&agent(&empty).await, QUERIES).await;

            let private = {
                let mut private = read_source("shop", &dsn, Privacy::NoValues)
                    .await
                    .expect("a no-values snapshot");
                private.schema_sql = snapshot.schema_sql.clone();
                private
            };
            let (private_clone, private_report) =
                clone_of(&backend, TAG, &private, Fidelity::FULL).await;
            assert!(
                private_report.notes.iter().any(|n| n.contains("no-values")),
                "the evidence says what privacy mode costs: {:?}",
                private_report.notes
            );
            let on_private = shapes(&agent(&private_clone).await, QUERIES).await;

            eprintln!(
                "plan shapes, production against each copy ({} queries):",
                QUERIES.len()
            );
            for (i, query) in QUERIES.iter().enumerate() {
                let mark = |other: &[String]| {
                    if other[i] == on_production[i] {
                        "="
                    } else {
                        "x"
                    }
                };
                eprintln!(
                    "  {:>2} clone {} empty {} no-values {}  {query}",
                    i + 1,
                    mark(&on_clone),
                    mark(&on_empty),
                    mark(&on_private)
                );
                if on_clone[i] != on_production[i] {
                    eprintln!(
                        "       production: {}\n       clone:      {}",
                        on_production[i], on_clone[i]
                    );
                }
            }
            let (clone_rate, empty_rate, private_rate) = (
                agreement(&on_production, &on_clone),
                agreement(&on_production, &on_empty),
                agreement(&on_production, &on_private),
            );
            eprintln!(
                "agreement with production: clone {:.1} %, schema-only copy {:.1} %, \
                 no-values clone {:.1} %",
                clone_rate * 100.0,
                empty_rate * 100.0,
                private_rate * 100.0
            );
            assert!(
                clone_rate >= 0.95,
                "clone agrees on {:.1} % of plans",
                clone_rate * 100.0
            );
            assert!(
                empty_rate <= clone_rate - 0.3,
                "the empty copy agrees on {:.1} %: the fixture does not make statistics matter",
                empty_rate * 100.0
            );

            // What the clone is: production's version, no rows, writable, and nothing that
            // reaches production.
            let client = agent(&clone).await;
            assert!(
                one_value(&client, "SHOW server_version_num")
                    .await
                    .starts_with("18")
            );
            assert_eq!(one_value(&client, "SELECT count(*) FROM orders").await, "0");
            assert_eq!(
                one_value(
                    &client,
                    "SELECT count(*) FROM pg_stats WHERE tablename = 'orders' \
                                    AND most_common_vals IS NOT NULL"
                )
                .await,
                one_value(
                    &production.superuser().await.expect("production"),
                    "SELECT count(*) FROM pg_stats WHERE tablename = 'orders' \
                           AND most_common_vals IS NOT NULL"
                )
                .await,
                "the clone's statistics are production's"
            );
            client
                .batch_execute(
                    "INSERT INTO regions VALUES (99, 'new'); \
                     INSERT INTO customers VALUES (1, 99, 'US', 'basic', '2024-01-01', 'a@b'); \
                     INSERT INTO orders VALUES (1, 1, 'pending', now(), 10, 'web')",
                )
                .await
                .expect("the padded clone takes inserts");
            assert_eq!(one_value(&client, "SELECT count(*) FROM orders").await, "1");
            assert_eq!(one_value(&client, "SELECT order_quantity(1)").await, "0");
            for extension in ["dblink", "postgres_fdw"] {
                let refused = client
                    .batch_execute(&format!("CREATE EXTENSION {extension}"))
                    .await
                    .expect_err("the agent cannot make a connection out of the clone");
                eprintln!("CREATE EXTENSION {extension}: {refused:?}");
            }
            let hypothetical = one_value(
                &client,
                "SELECT count(*) FROM extensions.hypopg_create_index(\
                 'CREATE INDEX ON orders (channel, total)')",
            )
            .await;
            assert_eq!(hypothetical, "1", "the agent can try a hypothetical index");
            let settings = one_value(
                &client,
                "SELECT coalesce(string_agg(array_to_string(setconfig, ','), ';'), '') \
                 FROM pg_db_role_setting",
            )
            .await;
            assert!(settings.contains("random_page_cost=1.1"), "{settings}");
            assert_secret_absent("the clone's settings", &settings, &secrets);

            let private_client = agent(&private_clone).await;
            assert_eq!(
                one_value(
                    &private_client,
                    "SELECT count(*) FROM pg_stats WHERE schemaname = 'public' AND \
                     (most_common_vals IS NOT NULL OR histogram_bounds IS NOT NULL \
                      OR most_common_elems IS NOT NULL)"
                )
                .await,
                "0",
                "privacy mode leaves no sample value in the clone"
            );
            assert_ne!(
                one_value(
                    &private_client,
                    "SELECT count(*) FROM pg_stats WHERE schemaname = 'public' \
                     AND n_distinct IS NOT NULL"
                )
                .await,
                "0",
                "privacy mode keeps the counts"
            );

            // The DSN is never quoted back, whatever fails.
            let wrong = generate_secret();
            let refused = read_source(
                "shop",
                &production.dsn_with(wrong.expose_secret()),
                Privacy::KeepValues,
            )
            .await
            .expect_err("a wrong password is refused");
            assert_secret_absent("a refused login", &refused.to_string(), &[&wrong]);
            let refused = backend
                .dump_schema(
                    engine("postgres"),
                    18,
                    &production.dsn_with(wrong.expose_secret()),
                )
                .await
                .expect_err("pg_dump with a wrong password fails");
            assert_secret_absent("a failed pg_dump", &refused.to_string(), &[&wrong]);
            eprintln!("refused pg_dump: {refused}");

            for instance in [&clone, &empty, &private_clone] {
                remove(&backend, instance).await;
            }
            production.remove(&docker).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_17_source_gets_a_17_clone_with_table_statistics() {
    const TAG: &str = "clone17";
    let Some(harness) = Harness::new(TAG, &[POSTGRES, POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let owner = harness_owner(TAG);
            let production = Production::start(&docker, POSTGRES, &owner).await;
            production
                .load(
                    "CREATE TABLE readings (id int PRIMARY KEY, sensor int NOT NULL, value float8); \
                     INSERT INTO readings SELECT g, g % 500, g * 0.5 \
                     FROM generate_series(1, 300000) g; \
                     CREATE INDEX readings_sensor_idx ON readings (sensor);",
                    FINISH,
                )
                .await;
            let snapshot = sandboxd_backend::clone::take_snapshot(
                &*backend,
                engine("postgres"),
                "meters",
                &production.reader_dsn(),
                Privacy::KeepValues,
            )
            .await
            .expect("snapshot of a 17 source");
            assert_eq!(snapshot.major(), 17);
            assert!(snapshot.columns.is_empty(), "17 cannot import column statistics");

            let (clone, report) = clone_of(&backend, TAG, &snapshot, Fidelity::FULL).await;
            assert!(
                report.notes.iter().any(|n| n.contains("column statistics")),
                "the evidence says what a 17 clone lacks: {:?}",
                report.notes
            );
            let client = agent(&clone).await;
            assert!(one_value(&client, "SHOW server_version_num").await.starts_with("17"));
            let source = production.superuser().await.expect("production");
            let sizes = "SELECT relpages || '/' || reltuples FROM pg_class WHERE relname = 'readings'";
            assert_eq!(one_value(&client, sizes).await, one_value(&source, sizes).await);
            let queries = [
                "SELECT * FROM readings WHERE id = 5",
                "SELECT * FROM readings ORDER BY id LIMIT 10",
                "SELECT * FROM readings",
                "SELECT count(*) FROM readings",
            ];
            assert_eq!(shapes(&client, &queries).await, shapes(&source, &queries).await);

            // A clone needs the same major version: an 18 instance refuses a 17 snapshot.
            let mut request = request("postgres", &harness_owner(TAG), &[]);
            request.major = Some(18);
            let eighteen = backend.provision(&request).await.expect("an 18 instance");
            let refused = apply(
                &*backend,
                &eighteen,
                &snapshot,
                Fidelity::FULL,
                SchemaOwner::Agent,
            )
                .await
                .expect_err("a 17 snapshot on 18 is refused");
            assert!(refused.to_string().contains("same major version"), "{refused}");

            for instance in [&clone, &eighteen] {
                remove(&backend, instance).await;
            }
            production.remove(&docker).await;
        })
        .await;
}
