//! MariaDB: the official image's contract (`MARIADB_*`), Debian's packages for processes, and a
//! handed-out user with every privilege on its own database and on the databases test runners
//! create (`test_*`, `<db>_*`), but no global privilege.

use std::time::Duration;

use secrecy::SecretString;

use crate::credentials::{Credentials, mysql_native_hash};
use crate::engine::{
    AdminAccess, AdminStep, CommandPlan, ContainerRecipe, ContainerSecret, Engine, EngineRecipes,
    EnvRendering, FeatureKind, MYSQL_SOCKET_FILE, PlannedFile, ProcessContext, ProcessRecipe,
    Protocol, ResetPlan, ServerFacts, Signal, TemplatePlan, Tmpfs, UrlPath, mysql_identifier,
    sql_literal,
};

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
    fn container(&self, admin: &Credentials, _agent: &Credentials) -> ContainerRecipe {
        let mut command = vec!["mariadbd".to_owned()];
        command.extend(THROWAWAY_ARGS.iter().map(|a| (*a).to_owned()));
        // A small redo log leaves the data tmpfs to the tenant's tables; the tmpfs itself stays
        // well below the memory cap (its pages count against it), so a full tmpfs ends in
        // "table is full" for the statement, not in an OOM kill of the server.
        command.push("--innodb-log-file-size=16M".to_owned());
        ContainerRecipe {
            // Loading the zone tables takes seconds and no test suite of a sandbox needs them.
            env: vec![("MARIADB_INITDB_SKIP_TZINFO".into(), "1".into())],
            secret: Some(ContainerSecret {
                var: "MARIADB_ROOT_PASSWORD",
                value: admin.password.clone(),
            }),
            command,
            user: Some("mysql"),
            tmpfs: vec![
                Tmpfs {
                    path: "/var/lib/mysql",
                    size_mb: 256,
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
            programs: &["mariadb-install-db", "mariadbd"],
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

    fn reset(&self, _agent: &Credentials, _facts: ServerFacts) -> ResetPlan {
        ResetPlan::SqlDatabases {
            name_patterns: agent_databases().to_vec(),
            recreate: vec![AdminStep::Sql {
                database: None,
                statement: SecretString::from(create_database()),
            }],
        }
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
        // Every table in the system tablespace, capped at half the instance's space: InnoDB then
        // answers "table is full" at its own limit instead of meeting ENOSPC in a file it is
        // extending (which it treats as fatal when a rollback needs the space).
        "--innodb-file-per-table=0".to_owned(),
        format!(
            "--innodb-data-file-path=ibdata1:12M:autoextend:max:{}M",
            (ctx.data_limit_mb / 2).max(24)
        ),
    ];
    args.extend(THROWAWAY_ARGS.iter().map(|a| (*a).to_owned()));
    let plan = CommandPlan {
        program: ctx.programs["mariadbd"].clone(),
        args,
    };
    (plan, vec![])
}
