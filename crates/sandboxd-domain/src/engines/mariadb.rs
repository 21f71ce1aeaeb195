//! MariaDB: the official image's contract (`MARIADB_*`), Debian's packages for processes, and a
//! handed-out user with every privilege on its own database and on the databases test runners
//! create (`test_*`, `<db>_*`), but no global privilege.

use std::time::Duration;

use secrecy::SecretString;

use crate::credentials::{Credentials, mysql_native_hash};
use crate::engine::{
    AdminAccess, AdminStep, CommandPlan, ContainerRecipe, ContainerSecret, Engine, EngineRecipes,
    EnvRendering, FeatureKind, MYSQL_SOCKET_FILE, PlannedFile, ProcessContext, ProcessRecipe,
    Protocol, ResetPlan, ServerFacts, Signal, TemplateOutput, TemplatePlan, Tmpfs, UrlPath,
    mysql_identifier, sql_literal,
};
use crate::space::DataSize;

#[derive(Debug, Default)]
pub struct MariaDb;

/// Settings that trade durability for speed, for both forms.
const THROWAWAY_ARGS: &[&str] = &[
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--skip-log-bin",
    "--innodb-buffer-pool-size=64M",
    "--skip-name-resolve",
];

/// What test suites expect of the server, for both forms: utf8mb4 (a 4-byte character fits a
/// table made without a charset clause), with the collation MariaDB 11.8 defaults to, so the
/// host's older server (whose own default is latin1) behaves like the images.
const SUITE_ARGS: &[&str] = &[
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_uca1400_ai_ci",
];

/// The image form's connections collate as the host's 10.11 does: a client that asks for utf8mb4
/// gets `utf8mb4_general_ci`, not the `uca1400_ai_ci` that 11.2+ maps it to. Under uca1400 (and
/// `unicode_ci`) MariaDB 11.8 compares `LIKE` on a native UUID column case-sensitively although
/// both collations are case-insensitive, so Django's `icontains` on a `UUIDField` finds nothing.
/// Tables keep `collation_server`. 10.11 has no such option, hence the image form only.
const IMAGE_CONNECTION_ARGS: &[&str] = &["--character-set-collations=utf8mb4=utf8mb4_general_ci"];

/// The time-zone SQL (`mysql.time_zone*`) the template's install loads, a file of the build
/// directory: `CONVERT_TZ(…, 'UTC', 'Europe/Paris')` and Django's named zones work.
const TZINFO_SQL: &str = "tzinfo.sql";
/// The host's zone database (Debian's tzdata).
const ZONEINFO: &str = "/usr/share/zoneinfo";

pub static MARIADB: Engine = Engine {
    name: "mariadb",
    title: "MariaDB",
    protocol: Protocol::Mysql,
    images: &["mariadb:11", "sandboxd-local/mariadb:11"],
    port: 3306,
    readiness_deadline: Duration::from_secs(60),
    feature_kind: FeatureKind::Extension,
    features: &[],
    admin_user: "root",
    admin_database: "",
    agent_user: "sandbox",
    agent_database: "sandbox",
    data_on_disk: true,
    env: EnvRendering {
        scheme: "mysql",
        path: UrlPath::Database,
        query: "",
        url_var: "MYSQL_URL",
        host_var: "MYSQL_HOST",
        port_var: "MYSQL_PORT",
        user_var: "MYSQL_USER",
        password_var: "MYSQL_PASSWORD",
        database_var: Some("MYSQL_DB"),
    },
    recipes: &MariaDb,
};

impl EngineRecipes for MariaDb {
    fn container(
        &self,
        admin: &Credentials,
        _agent: &Credentials,
        size: DataSize,
    ) -> ContainerRecipe {
        let mut command = vec!["mariadbd".to_owned()];
        command.extend(THROWAWAY_ARGS.iter().map(|a| (*a).to_owned()));
        command.extend(SUITE_ARGS.iter().map(|a| (*a).to_owned()));
        command.extend(IMAGE_CONNECTION_ARGS.iter().map(|a| (*a).to_owned()));
        // InnoDB sized to the data tmpfs; the tmpfs itself stays below the memory cap (its
        // pages count against it), so a full tmpfs ends in "table is full" for the statement,
        // not in an OOM kill of the server.
        command.extend(innodb_space_args(size.mb()));
        ContainerRecipe {
            // The zone tables are loaded: the official image loads them at its first start,
            // the local one has them in its baked datadir.
            env: vec![],
            secret: Some(ContainerSecret {
                var: "MARIADB_ROOT_PASSWORD",
                value: admin.password.clone(),
            }),
            command,
            user: Some("mysql"),
            tmpfs: vec![
                Tmpfs {
                    path: "/var/lib/mysql",
                    size_mb: size.mb(),
                    mode: "1777",
                    uid: Some(999),
                },
                Tmpfs {
                    path: "/run/mysqld",
                    size_mb: 1,
                    mode: "1777",
                    uid: Some(999),
                },
                Tmpfs {
                    path: "/tmp",
                    size_mb: 32,
                    mode: "1777",
                    uid: Some(999),
                },
            ],
            capabilities: vec![],
        }
    }

    fn process(&self) -> Option<ProcessRecipe> {
        Some(ProcessRecipe {
            package: "mariadb-server",
            programs: &["mariadb-install-db", "mariadbd", "mariadb-tzinfo-to-sql"],
            search_dirs: &["/usr/sbin"],
            template: Some(template),
            launch,
            // mariadb-install-db's socket authentication: the daemon's OS user is a superuser
            // on the private socket, and no superuser is reachable over TCP.
            admin: |ctx| AdminAccess::Socket {
                directory: ctx.socket_dir.to_path_buf(),
                user: ctx.daemon_user.to_owned(),
            },
            bootstrap: None,
            graceful_signal: Signal::Term,
            wal_dir: None,
        })
    }

    fn setup(&self, agent: &Credentials, _facts: ServerFacts) -> Vec<AdminStep> {
        let account = format!("{}@'%'", sql_literal(&agent.user));
        // The native-password hash, never the password: the statement may be logged.
        let password = sql_literal(&mysql_native_hash(&agent.password));
        let mut statements = vec![
            create_database(),
            format!("CREATE USER {account} IDENTIFIED BY PASSWORD {password}"),
        ];
        statements.extend(agent_databases().iter().map(|pattern| {
            format!(
                "GRANT ALL PRIVILEGES ON {}.* TO {account}",
                mysql_identifier(pattern)
            )
        }));
        statements
            .into_iter()
            .map(|statement| AdminStep::Sql {
                database: None,
                statement: SecretString::from(statement),
            })
            .collect()
    }

    fn pool_prepare(&self) -> Vec<AdminStep> {
        vec![AdminStep::Sql {
            database: None,
            statement: SecretString::from(create_database()),
        }]
    }

    fn reset(&self, _agent: &Credentials, _facts: ServerFacts, _database: &str) -> ResetPlan {
        ResetPlan::SqlDatabases {
            name_patterns: agent_databases().to_vec(),
            recreate: vec![AdminStep::Sql {
                database: None,
                statement: SecretString::from(create_database()),
            }],
        }
    }
}

/// How InnoDB shares a data space of `data_mb` (both forms): every table in the system
/// tablespace, which grows up to what the redo log and a reserve leave, so InnoDB answers "table
/// is full" at its own limit instead of meeting ENOSPC in a file it is extending (which it treats
/// as fatal when a rollback needs the space). The redo log is a sixteenth of the space (16 to 128
/// MB: enough for a suite's transactions, little of the tenant's room); the reserve, an eighth
/// (at least 32 MB), keeps room for the system tables, the undo logs, temporary files and the
/// temporary tablespace, which is capped at half of it. A 512 MB space gives tables 416 MB, 2 GB
/// gives 1664 MB.
fn innodb_space_args(data_mb: u64) -> Vec<String> {
    let space = innodb_space(data_mb);
    vec![
        "--innodb-file-per-table=0".to_owned(),
        format!(
            "--innodb-data-file-path=ibdata1:12M:autoextend:max:{}M",
            space.tables_mb
        ),
        format!("--innodb-log-file-size={}M", space.redo_mb),
        format!(
            "--innodb-temp-data-file-path=ibtmp1:12M:autoextend:max:{}M",
            space.temp_mb
        ),
    ]
}

/// What [`innodb_space_args`] gives each part of a data space, in MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InnodbSpace {
    tables_mb: u64,
    redo_mb: u64,
    temp_mb: u64,
}

fn innodb_space(data_mb: u64) -> InnodbSpace {
    let redo_mb = (data_mb / 16).clamp(16, 128);
    let reserve_mb = (data_mb / 8).max(32);
    InnodbSpace {
        // Never below the system tablespace's first 12 MB and a little room.
        tables_mb: data_mb.saturating_sub(redo_mb + reserve_mb).max(24),
        redo_mb,
        temp_mb: (reserve_mb / 2).max(12),
    }
}

/// Every database name the agent may use (`GRANT … ON <pattern>.*`, `LIKE` patterns): its own,
/// the `test_…` ones test frameworks make (Django, Rails), and its own `sandbox_…` ones.
fn agent_databases() -> [String; 3] {
    [
        MARIADB.agent_database.to_owned(),
        "test\\_%".to_owned(),
        format!("{}\\_%", MARIADB.agent_database),
    ]
}

fn create_database() -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {}",
        mysql_identifier(MARIADB.agent_database)
    )
}

fn template(ctx: &ProcessContext<'_>) -> TemplatePlan {
    TemplatePlan {
        outputs: vec![TemplateOutput {
            command: CommandPlan {
                program: ctx.programs["mariadb-tzinfo-to-sql"].clone(),
                args: vec![
                    "--no-defaults".into(),
                    "--skip-write-binlog".into(),
                    ZONEINFO.into(),
                ],
            },
            file: TZINFO_SQL,
        }],
        commands: vec![CommandPlan {
            program: ctx.programs["mariadb-install-db"].clone(),
            args: vec![
                "--no-defaults".into(),
                format!("--datadir={}", ctx.data_dir.display()),
                format!("--user={}", ctx.run_as),
                "--auth-root-authentication-method=socket".into(),
                format!("--auth-root-socket-user={}", ctx.daemon_user),
                "--skip-test-db".into(),
                "--skip-name-resolve".into(),
                format!(
                    "--extra-file={}",
                    ctx.instance_dir.join(TZINFO_SQL).display()
                ),
            ],
        }],
        files: vec![],
    }
}

fn launch(ctx: &ProcessContext<'_>) -> (CommandPlan, Vec<PlannedFile>) {
    let mut args = vec![
        "--no-defaults".to_owned(),
        format!("--datadir={}", ctx.data_dir.display()),
        format!("--port={}", ctx.port),
        "--bind-address=127.0.0.1".to_owned(),
        format!(
            "--socket={}",
            ctx.socket_dir.join(MYSQL_SOCKET_FILE).display()
        ),
        format!(
            "--pid-file={}",
            ctx.instance_dir.join("mysqld.pid").display()
        ),
        format!("--tmpdir={}", ctx.instance_dir.display()),
        "--innodb-use-native-aio=0".to_owned(),
    ];
    args.extend(innodb_space_args(ctx.data_limit_mb));
    args.extend(THROWAWAY_ARGS.iter().map(|a| (*a).to_owned()));
    args.extend(SUITE_ARGS.iter().map(|a| (*a).to_owned()));
    let plan = CommandPlan {
        program: ctx.programs["mariadbd"].clone(),
        args,
    };
    (plan, vec![])
}

#[cfg(test)]
mod space_tests {
    use super::*;

    #[test]
    fn innodb_takes_the_space_left_after_its_redo_log_and_a_reserve() {
        for (data_mb, tables_mb, redo_mb, temp_mb) in [
            (256, 208, 16, 16),
            (512, 416, 32, 32),
            (1024, 832, 64, 64),
            (2048, 1664, 128, 128),
            (8192, 7040, 128, 512),
        ] {
            let space = innodb_space(data_mb);
            assert_eq!(
                space,
                InnodbSpace {
                    tables_mb,
                    redo_mb,
                    temp_mb
                },
                "{data_mb} MB"
            );
            assert!(
                space.tables_mb + space.redo_mb + space.temp_mb < data_mb,
                "{data_mb} MB: room is left for the system tables and temporary files"
            );
        }
        let args = innodb_space_args(1024);
        assert!(args.contains(&"--innodb-file-per-table=0".to_owned()));
        assert!(
            args.contains(&"--innodb-data-file-path=ibdata1:12M:autoextend:max:832M".to_owned())
        );
        assert!(args.contains(&"--innodb-log-file-size=64M".to_owned()));
    }

    #[test]
    fn the_container_sizes_its_data_tmpfs_and_innodb_alike() {
        let admin = Credentials::generate("root");
        let recipe = MariaDb.container(&admin, &admin, DataSize::from_mb(1024));
        let data = recipe
            .tmpfs
            .iter()
            .find(|t| t.path == "/var/lib/mysql")
            .expect("a data tmpfs");
        assert_eq!(data.size_mb, 1024);
        assert!(
            recipe
                .command
                .contains(&"--innodb-data-file-path=ibdata1:12M:autoextend:max:832M".to_owned()),
            "{:?}",
            recipe.command
        );
    }
}
