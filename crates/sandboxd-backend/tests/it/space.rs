//! Room for the suites people run (issue 29): the process backend's data tmpfs has inodes in
//! proportion to its size (a test suite's many empty relation files ran out of a fixed 65,536),
//! a size asked for is the size a process instance or a container gets, with a memory cap grown
//! to hold it, and MariaDB's tablespace fills what its redo log leaves, failing a statement, not
//! the server, when full.

use std::path::Path;

use mysql_async::prelude::Queryable;
use nix::sys::statvfs::statvfs;
use sandboxd_backend::{Backend, InstanceHandle};
use sandboxd_domain::{AgentSlug, DataSize, Instance};

use crate::attack_docker::exec;
use crate::attack_process::{isolated_host, server_log};
use crate::docker::{Harness, MARIADB, POSTGRES, harness_owner};
use crate::support::{self, ProcessHarness, request};

const MIB: u64 = 1024 * 1024;

async fn provision_sized(
    backend: &dyn Backend,
    engine: &str,
    owner: &AgentSlug,
    size: Option<DataSize>,
) -> Instance {
    let mut wanted = request(engine, owner, &[]);
    wanted.size = size;
    backend
        .provision(&wanted)
        .await
        .unwrap_or_else(|err| panic!("provision {engine} of {size:?}: {err}"))
}

/// (bytes, inodes) of the filesystem at `dir`.
fn capacity(dir: &Path) -> (u64, u64) {
    let stats = statvfs(dir).unwrap_or_else(|e| panic!("statvfs {}: {e}", dir.display()));
    (stats.blocks() * stats.fragment_size(), stats.files())
}

/// The memory cap of a process instance's cgroup (v1 or v2), in bytes.
fn memory_cap(instance: &Instance) -> u64 {
    let v1 = Path::new("/sys/fs/cgroup/memory/sandboxd")
        .join(&instance.name)
        .join("memory.limit_in_bytes");
    let v2 = Path::new("/sys/fs/cgroup/sandboxd")
        .join(&instance.name)
        .join("memory.max");
    std::fs::read_to_string(&v1)
        .or_else(|_| std::fs::read_to_string(&v2))
        .expect("the instance has a memory cgroup")
        .trim()
        .parse()
        .expect("a number of bytes")
}

#[tokio::test]
async fn a_default_process_instance_holds_far_more_files_than_sixty_five_thousand() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let pg = provision_sized(&*backend, "postgres", &support::owner("inodes"), None).await;
            let dir = Path::new(&pg.backend_id);
            let (bytes, inodes) = capacity(dir);
            assert_eq!(bytes, 512 * MIB, "the default data space");
            assert_eq!(inodes, 262_144, "one inode per 2 KiB of it");
            assert_eq!(pg.size, Some(DataSize::from_mb(512)));

            // 100,000 empty files, as a suite's relation forks are: past the old 65,536.
            let probe = dir.join("inode-probe");
            std::fs::create_dir(&probe).expect("probe dir");
            for i in 0..100_000 {
                std::fs::File::create(probe.join(i.to_string()))
                    .unwrap_or_else(|e| panic!("file {i} of 100000: {e}"));
            }
            // The server still makes relations beside them.
            let client = support::pg(&pg).await;
            client
                .batch_execute(
                    "CREATE TABLE after_100k (id int PRIMARY KEY, v text); \
                     INSERT INTO after_100k SELECT g, 'x' FROM generate_series(1, 1000) g",
                )
                .await
                .expect("a table beside 100,000 files");
            std::fs::remove_dir_all(&probe).expect("remove the probe files");
            backend
                .teardown(&InstanceHandle::of(&pg))
                .await
                .expect("teardown");
        })
        .await;
}

#[tokio::test]
async fn a_sized_process_instance_gets_its_space_inodes_and_a_grown_memory_cap() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let size = DataSize::parse("1G").expect("size");
            let pg =
                provision_sized(&*backend, "postgres", &support::owner("sized"), Some(size)).await;
            let (bytes, inodes) = capacity(Path::new(&pg.backend_id));
            assert_eq!((bytes, inodes), (1024 * MIB, 524_288));
            // Its tmpfs pages count against the cap: it grew by what the space grew.
            let config = backend.config();
            assert_eq!(
                memory_cap(&pg),
                (config.memory_limit_mb + 1024 - config.data_limit_mb) * MIB
            );
            let temp: String = support::pg(&pg)
                .await
                .query_one("SHOW temp_file_limit", &[])
                .await
                .expect("show")
                .get(0);
            assert_eq!(temp, "256MB", "a quarter of the space it was given");
            assert_eq!(pg.size, Some(size));
            let evidence = serde_json::to_value(pg.evidence(&Default::default())).expect("json");
            assert_eq!(evidence["size_mb"], 1024, "the agent is told its size");
            backend
                .teardown(&InstanceHandle::of(&pg))
                .await
                .expect("teardown");
        })
        .await;
}

/// `innodb_data_file_path`, `innodb_log_file_size` and `innodb_file_per_table` as the server
/// runs with them.
async fn innodb_settings(instance: &Instance) -> (String, u64, String) {
    let mut conn = support::mysql(instance).await;
    let get = |name: &'static str| format!("SELECT @@GLOBAL.{name}");
    let path: String = conn
        .query_first(get("innodb_data_file_path"))
        .await
        .expect("data file path")
        .expect("a value");
    let redo: u64 = conn
        .query_first(get("innodb_log_file_size"))
        .await
        .expect("log file size")
        .expect("a value");
    let per_table: String = conn
        .query_first("SELECT IF(@@GLOBAL.innodb_file_per_table, 'ON', 'OFF')")
        .await
        .expect("file per table")
        .expect("a value");
    (path, redo, per_table)
}

#[tokio::test]
async fn mariadb_of_a_gigabyte_takes_a_600_mb_table_then_refuses_a_statement_and_answers() {
    if !isolated_host() {
        return;
    }
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let size = DataSize::parse("1G").expect("size");
            let maria = provision_sized(
                &*backend,
                "mariadb",
                &support::owner("maria-1g"),
                Some(size),
            )
            .await;
            let (path, redo, per_table) = innodb_settings(&maria).await;
            assert_eq!(path, "ibdata1:12M:autoextend:max:832M");
            assert_eq!(redo, 64 * MIB);
            assert_eq!(per_table, "OFF");

            let mut conn = support::mysql(&maria).await;
            conn.query_drop("CREATE TABLE victim(v TEXT); INSERT INTO victim VALUES ('kept')")
                .await
                .expect("victim data");
            conn.query_drop("CREATE TABLE big(pad LONGBLOB) ENGINE=InnoDB")
                .await
                .expect("big");
            // 20 MB a statement until InnoDB says the table is full.
            let mut inserted_mb = 0;
            let mut full = None;
            for _ in 0..60 {
                match conn
                    .query_drop("INSERT INTO big SELECT REPEAT('x', 1048576) FROM seq_1_to_20")
                    .await
                {
                    Ok(()) => inserted_mb += 20,
                    Err(err) => {
                        full = Some(err.to_string());
                        break;
                    }
                }
            }
            let log = || server_log(&maria);
            let full = full.unwrap_or_else(|| panic!("1.2 GB fit in 1 GB?\n{}", log()));
            assert!(full.contains("is full"), "{full}\n{}", log());
            assert!(
                inserted_mb >= 600,
                "a 1 GB space took only {inserted_mb} MB of rows before: {full}"
            );
            eprintln!("a 1 GB MariaDB took {inserted_mb} MB of rows, then: {full}");
            // The same connection, then a new one: the server lives on with the data.
            let kept: Option<String> = conn
                .query_first("SELECT v FROM victim")
                .await
                .unwrap_or_else(|err| panic!("the next statement answers: {err}\n{}", log()));
            assert_eq!(kept.as_deref(), Some("kept"));
            let rows: Option<u64> = support::mysql(&maria)
                .await
                .query_first("SELECT COUNT(*) FROM big")
                .await
                .expect("a new connection answers");
            assert_eq!(rows, Some(inserted_mb), "1 MB a row");
            drop(conn);
            backend
                .teardown(&InstanceHandle::of(&maria))
                .await
                .expect("teardown");
        })
        .await;
}

/// The Docker engine's own tmpfs default (`nr_inodes` unset: half the host's RAM pages) is what
/// a container's data tmpfs gets; a size asked for is its data tmpfs and InnoDB's, and its
/// memory cap grows by what the space grew.
#[tokio::test]
async fn a_sized_container_gets_its_tmpfs_innodb_and_a_grown_memory_cap() {
    let Some(harness) = Harness::new("space-docker", &[MARIADB, POSTGRES], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let size = DataSize::parse("1G").expect("size");
            let maria = provision_sized(
                &*backend,
                "mariadb",
                &harness_owner("space-docker"),
                Some(size),
            )
            .await;
            let found = docker
                .inspect_container(&maria.backend_id, None)
                .await
                .expect("inspect");
            let host = found.host_config.expect("host config");
            assert_eq!(
                host.memory,
                Some(i64::try_from((512 + 1024 - 256) * MIB).expect("fits")),
                "the default 512 MB cap grew by the 768 MB the space grew"
            );
            let tmpfs = host.tmpfs.expect("tmpfs");
            assert!(tmpfs["/var/lib/mysql"].contains("size=1024m"), "{tmpfs:?}");
            assert_eq!(
                innodb_settings(&maria).await,
                (
                    "ibdata1:12M:autoextend:max:832M".to_owned(),
                    64 * MIB,
                    "OFF".to_owned()
                )
            );
            assert_eq!(maria.size, Some(size));

            // The default size, and the engine's default inode count on its data tmpfs.
            let pg =
                provision_sized(&*backend, "postgres", &harness_owner("space-docker"), None).await;
            assert_eq!(pg.size, Some(DataSize::CONTAINER_DEFAULT));
            let (code, out) = exec(
                &docker,
                &pg.backend_id,
                None,
                &["stat", "-f", "-c", "%b %S %c", "/var/lib/postgresql/data"],
            )
            .await;
            assert_eq!(code, 0, "{out}");
            let numbers: Vec<u64> = out
                .split_whitespace()
                .map(|n| n.parse().expect("a number"))
                .collect();
            assert_eq!(numbers[0] * numbers[1], 256 * MIB, "{out}");
            assert!(
                numbers[2] >= 262_144,
                "a 256 MB data tmpfs holds at least as many files as the process backend's \
                 512 MB one: {out}"
            );
            for instance in [&maria, &pg] {
                backend
                    .teardown(&InstanceHandle::of(instance))
                    .await
                    .expect("teardown");
            }
        })
        .await;
}
