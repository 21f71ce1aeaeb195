//! `sandbox_sql` holds at most its byte limit whatever the server sends: a 250 MB value is cut
//! while it arrives, and the peak memory of the process asking (this test process: nextest runs
//! each test in a process of its own) grows by the limit and a fixed overhead, not by the value.
//! Against real servers on the process backend, and Postgres on Docker (a 100 MB value there:
//! the container's memory cap is the server's limit before it is ours).

use sandboxd_backend::wire::{AgentStatement, Cut, QueryAnswer, QueryLimits};
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::Instance;

use crate::docker::{Harness, POSTGRES, harness_owner};
use crate::support::{self, ProcessHarness};

const MIB: u64 = 1024 * 1024;
/// What a query may add to the process's peak memory: the 1 MiB limit, the 256 KiB overhead
/// on the wire, the driver's buffers and the allocator's slack, with room to spare (the value
/// itself is 250 MiB: before the cut it added about 715 MiB).
const GROWTH_BUDGET: u64 = 48 * MIB;

/// A `/proc/self/status` field, bytes.
fn status_bytes(field: &str) -> u64 {
    sandboxd_testkit::proc_status_bytes("self", field)
}

/// Runs `query` and answers it with how much it raised this process's peak resident memory
/// above the resident memory before it (the peak is reset first: `clear_refs` 5).
async fn peak_growth<F: std::future::Future<Output = T>, T>(query: F) -> (T, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak (clear_refs)");
    let before = status_bytes("VmRSS:");
    let answer = query.await;
    let peak = status_bytes("VmHWM:");
    (answer, peak.saturating_sub(before))
}

async fn sql(backend: &dyn Backend, instance: &Instance, statement: &str) -> QueryAnswer {
    backend
        .query(
            instance,
            &AgentStatement::Sql(statement.to_owned()),
            QueryLimits::default(),
        )
        .await
        .unwrap_or_else(|err| panic!("{statement}: {err}"))
}

fn assert_cut_empty(answer: &QueryAnswer, what: &str) {
    assert!(
        answer.rows.is_empty(),
        "{what}: {} row(s)",
        answer.rows.len()
    );
    assert!(answer.truncated, "{what}: {answer:?}");
    assert_eq!(answer.cut, Some(Cut::MaxBytes), "{what}");
}

/// The Postgres cases, on any backend, with a value of `huge` bytes.
async fn postgres_rounds(backend: &dyn Backend, instance: &Instance, huge: u64) {
    // Warm: the first connection's one-time allocations are not the query's.
    let one = sql(backend, instance, "SELECT 1 AS one").await;
    assert_eq!(one.rows, vec![vec![serde_json::json!("1")]]);

    let value = format!("repeat('x', {huge})");
    let (answer, growth) = peak_growth(sql(backend, instance, &format!("SELECT {value}"))).await;
    eprintln!(
        "postgres: a {} MB value raised the peak by {} KiB",
        huge / 1_000_000,
        growth / 1024
    );
    assert_cut_empty(&answer, "a huge value");
    assert!(
        growth < GROWTH_BUDGET,
        "a {huge}-byte value raised the peak by {} MiB (budget {} MiB)",
        growth / MIB,
        GROWTH_BUDGET / MIB
    );

    // Rows before the huge one are the answer, cut at max_bytes.
    let (mixed, growth) = peak_growth(sql(
        backend,
        instance,
        &format!(
            "SELECT CASE WHEN g < 3 THEN 'small' ELSE {value} END AS v \
             FROM generate_series(1, 5) g"
        ),
    ))
    .await;
    assert_eq!(mixed.rows.len(), 2, "{mixed:?}");
    assert_eq!(mixed.cut, Some(Cut::MaxBytes));
    assert!(growth < GROWTH_BUDGET, "{} MiB", growth / MIB);

    // Many rows that together pass the limit: cut by the collector, the rest never read on.
    let many = sql(
        backend,
        instance,
        "SELECT g, repeat('y', 2000) FROM generate_series(1, 200000) g",
    )
    .await;
    assert!(
        !many.rows.is_empty() && many.rows.len() < 1000,
        "{}",
        many.rows.len()
    );
    assert_eq!(many.cut, Some(Cut::MaxBytes));

    // A server message over the limit (an error of 20 MB) is cut like a row.
    let error = sql(
        backend,
        instance,
        "DO $$ BEGIN RAISE EXCEPTION '%', repeat('e', 20000000); END $$",
    )
    .await;
    assert_cut_empty(&error, "a 20 MB error");

    // A held connection (run_experiment's sql()) is cut the same way, and says it is gone.
    let held = backend
        .agent_connection(instance, "bounded test", std::time::Duration::from_secs(10))
        .await
        .expect("a held connection");
    let limits = QueryLimits {
        max_bytes: 4 * MIB as usize,
        ..QueryLimits::default()
    };
    let small = held.run("SELECT 2 AS two", limits).await.expect("small");
    assert_eq!(small.rows.len(), 1);
    let (cut, growth) = peak_growth(held.run(&format!("SELECT {value}"), limits)).await;
    assert_cut_empty(
        &cut.expect("an answer"),
        "a 250 MB value on a held connection",
    );
    assert!(growth < GROWTH_BUDGET, "{} MiB", growth / MIB);
    assert!(held.is_closed(), "the cut connection is gone");

    // The instance is fine, and the agent's ordinary statements are answered whole.
    let after = sql(
        backend,
        instance,
        "SELECT count(*) FROM generate_series(1, 10)",
    )
    .await;
    assert_eq!(after.rows, vec![vec![serde_json::json!("10")]]);
    assert!(!after.truncated);
}

#[tokio::test]
async fn a_huge_postgres_value_is_cut_as_it_arrives_on_the_process_backend() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let pg = support::provision(&backend, "postgres", &support::owner("bpg")).await;
            postgres_rounds(backend.as_ref(), &pg, 250_000_000).await;
            backend
                .teardown(&InstanceHandle::of(&pg))
                .await
                .expect("teardown");
        })
        .await;
}

/// The handed-out account without the driver's half-second reply timeout: making a 200 MB
/// value can take longer on a busy machine.
async fn patient_redis(instance: &Instance) -> redis::aio::MultiplexedConnection {
    use redis::IntoConnectionInfo;
    use secrecy::ExposeSecret;
    let info = redis::ConnectionAddr::Tcp(instance.host.clone(), instance.port)
        .into_connection_info()
        .expect("address")
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_username(&instance.agent.user)
                .set_password(instance.agent.password.expose_secret()),
        );
    redis::Client::open(info)
        .expect("client")
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect with the handed-out credentials")
}

#[tokio::test]
async fn a_huge_redis_reply_is_cut_as_it_arrives() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            // A 200 MB string: the instance keeps a quarter of a GB of data at most.
            let redis = support::provision(&backend, "redis", &support::owner("bredis")).await;
            let mut conn = patient_redis(&redis).await;
            let length: i64 = redis::cmd("SETRANGE")
                .arg("big")
                .arg(200_000_000 - 1)
                .arg("x")
                .query_async(&mut conn)
                .await
                .expect("a 200 MB value");
            assert_eq!(length, 200_000_000);
            let command = |words: &[&str]| {
                AgentStatement::Command(words.iter().map(|w| (*w).to_owned()).collect())
            };
            backend
                .query(&redis, &command(&["PING"]), QueryLimits::default())
                .await
                .expect("ping");
            let (answer, growth) = peak_growth(backend.query(
                &redis,
                &command(&["GET", "big"]),
                QueryLimits::default(),
            ))
            .await;
            let answer = answer.expect("an answer");
            eprintln!(
                "redis: a 200 MB value raised the peak by {} KiB",
                growth / 1024
            );
            assert_cut_empty(&answer, "a 200 MB Redis value");
            assert!(growth < GROWTH_BUDGET, "{} MiB", growth / MIB);
            // Within the limit, a reply is whole.
            let part = backend
                .query(
                    &redis,
                    &command(&["GETRANGE", "big", "0", "9"]),
                    QueryLimits::default(),
                )
                .await
                .expect("a part");
            assert_eq!(part.rows.len(), 1);
            assert!(!part.truncated);
            backend
                .teardown(&InstanceHandle::of(&redis))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn a_huge_mariadb_value_is_cut_as_it_arrives() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            // The server sends nothing over its own max_allowed_packet (16 MB): a 10 MB value
            // is what reaches the client, and is cut there.
            let mariadb = support::provision(&backend, "mariadb", &support::owner("bmaria")).await;
            sql(backend.as_ref(), &mariadb, "SELECT 1").await;
            let (answer, growth) = peak_growth(sql(
                backend.as_ref(),
                &mariadb,
                "SELECT REPEAT('x', 10000000) AS v",
            ))
            .await;
            eprintln!(
                "mariadb: a 10 MB value raised the peak by {} KiB",
                growth / 1024
            );
            assert_cut_empty(&answer, "a 10 MB MariaDB value");
            assert!(growth < 4 * MIB, "{} KiB", growth / 1024);
            let rows = sql(backend.as_ref(), &mariadb, "SELECT seq FROM seq_1_to_5000").await;
            assert_eq!(rows.rows.len(), 1000);
            assert_eq!(rows.cut, Some(Cut::MaxRows));
            backend
                .teardown(&InstanceHandle::of(&mariadb))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn huge_values_are_cut_as_they_arrive_on_docker() {
    let Some(harness) = Harness::new("dbounded", &[POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _| async move {
            let pg =
                crate::docker::provision(&backend, "postgres", &harness_owner("dbounded")).await;
            // The container's 512 MB cap leaves its server room for a 100 MB value, not for
            // 250 MB (it builds the value, then its text form).
            postgres_rounds(backend.as_ref(), &pg, 100_000_000).await;
            backend
                .teardown(&InstanceHandle::of(&pg))
                .await
                .expect("teardown");
        })
        .await;
}
