//! PostgreSQL: the official image's contract (`POSTGRES_*`), Debian's packages for processes, and
//! a handed-out role that owns its database and can create databases but holds no superuser power.

use std::time::Duration;

use secrecy::SecretString;

use crate::credentials::{Credentials, pg_scram_verifier};
use crate::engine::{
    Activation, AdminAccess, AdminStep, AgentCluster, CommandPlan, ContainerRecipe,
    ContainerSecret, Engine, EngineRecipes, FeatureKind, FeatureSpec, PG_EXTENSION_SCHEMA,
    PlannedFile, ProcessContext, ProcessRecipe, Protocol, ResetPlan, ServerFacts, Signal,
    TemplatePlan, Tmpfs, pg_identifier, sql_literal,
};
use crate::engine::{EnvRendering, UrlPath};

#[derive(Debug, Default)]
pub struct Postgres;

const DATA_MOUNT: &str = "/var/lib/postgresql/data";
/// A subdirectory of the tmpfs, so initdb can own it while the mount itself stays root's.
const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// The write-ahead log on a tmpfs of its own: when the data tmpfs fills, the statement that
/// filled it fails ("could not extend file"), while the WAL still has room, so the server never
/// PANICs on a WAL write.
const WAL_MOUNT: &str = "/var/lib/postgresql/wal";
const WALDIR: &str = "/var/lib/postgresql/wal/pg_wal";
const DATA_MB: u32 = 256;
/// Room for `max_wal_size` plus the segments written while a checkpoint catches up.
const WAL_MB: u32 = 96;

/// Sized to the container's tmpfs mounts: WAL is recycled well below `WAL_MB`, temporary files
/// (sorts, hashes) are capped below the data tmpfs, and shared buffers stay small because the
/// tmpfs pages count against the same memory cap.
const CONTAINER_SPACE_SETTINGS: &[&str] = &[
    "shared_buffers=32MB",
    "min_wal_size=32MB",
    "max_wal_size=48MB",
    "temp_file_limit=64MB",
];

static FEATURES: &[FeatureSpec] = &[
    FeatureSpec {
        name: "vector",
        summary: "pgvector: vector type and similarity search",
        activation: Activation::PgExtension {
            extension: "vector",
            package: "postgresql-{major}-pgvector",
        },
    },
    FeatureSpec {
        name: "postgis",
        summary: "PostGIS: geometry and geography types",
        activation: Activation::PgExtension {
            extension: "postgis",
            package: "postgresql-{major}-postgis-3",
        },
    },
    FeatureSpec {
        name: "pg_trgm",
        summary: "trigram matching for LIKE/ILIKE indexes",
        activation: Activation::PgExtension {
            extension: "pg_trgm",
            package: "postgresql-contrib",
        },
    },
    FeatureSpec {
        name: "citext",
        summary: "case-insensitive text type",
        activation: Activation::PgExtension {
            extension: "citext",
            package: "postgresql-contrib",
        },
    },
    FeatureSpec {
        name: "uuid-ossp",
        summary: "UUID generation functions",
        activation: Activation::PgExtension {
            extension: "uuid-ossp",
            package: "postgresql-contrib",
        },
    },
];

/// Settings that trade durability for start and test speed; a sandbox is thrown away anyway.
const THROWAWAY_SETTINGS: &[&str] = &[
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=100",
];

pub static POSTGRES: Engine = Engine {
    name: "postgres",
    title: "PostgreSQL",
    protocol: Protocol::Postgres,
    images: &["postgres:16-alpine", "sandboxd-local/postgres:17"],
    port: 5432,
    readiness_deadline: Duration::from_secs(60),
    feature_kind: FeatureKind::Extension,
    features: FEATURES,
    admin_user: "sandboxd_admin",
    admin_database: "postgres",
    agent_user: "sandbox",
    agent_database: "sandbox",
    env: EnvRendering {
        scheme: "postgresql",
        path: UrlPath::Database,
        query: "",
        url_var: "DATABASE_URL",
        host_var: "DB_HOST",
        port_var: "DB_PORT",
        user_var: "DB_USER",
        password_var: "DB_PASSWORD",
        database_var: Some("DB_NAME"),
    },
    recipes: &Postgres,
};

impl EngineRecipes for Postgres {
    fn container(&self, admin: &Credentials, _agent: &Credentials) -> ContainerRecipe {
        let mut command = vec!["postgres".to_owned()];
        for setting in THROWAWAY_SETTINGS.iter().chain(CONTAINER_SPACE_SETTINGS) {
            command.push("-c".to_owned());
            command.push((*setting).to_owned());
        }
        ContainerRecipe {
            env: vec![
                ("POSTGRES_USER".into(), admin.user.clone()),
                ("POSTGRES_DB".into(), POSTGRES.admin_database.into()),
                ("PGDATA".into(), PGDATA.into()),
                ("POSTGRES_INITDB_WALDIR".into(), WALDIR.into()),
            ],
            secret: Some(ContainerSecret {
                var: "POSTGRES_PASSWORD",
                value: admin.password.clone(),
            }),
            command,
            user: Some("postgres"),
            tmpfs: vec![
                Tmpfs {
                    path: DATA_MOUNT,
                    size_mb: DATA_MB,
                    mode: "1777",
                    uid: None,
                },
                Tmpfs {
                    path: WAL_MOUNT,
                    size_mb: WAL_MB,
                    mode: "1777",
                    uid: None,
                },
                Tmpfs {
                    path: "/var/run/postgresql",
                    size_mb: 1,
                    mode: "1777",
                    uid: None,
                },
            ],
            capabilities: vec![],
        }
    }

    fn process(&self) -> Option<ProcessRecipe> {
        Some(ProcessRecipe {
            package: "postgresql",
            programs: &["initdb", "postgres"],
            search_dirs: &["/usr/lib/postgresql/*/bin"],
            template: Some(template),
            launch,
            admin: |ctx| AdminAccess::Socket {
                directory: ctx.socket_dir.to_path_buf(),
                user: POSTGRES.admin_user.to_owned(),
            },
            bootstrap: None,
            graceful_signal: Signal::Int,
            wal_dir: Some("pg_wal"),
        })
    }

    fn setup(&self, agent: &Credentials, facts: ServerFacts) -> Vec<AdminStep> {
        let mut steps = vec![AdminStep::Sql {
            database: None,
            statement: SecretString::from(create_role(agent, facts)),
        }];
        steps.extend(database_steps(&agent.user));
        steps
    }

    fn pool_prepare(&self) -> Vec<AdminStep> {
        // The agent's database, owned by the superuser until `mint` hands it over.
        database_steps(POSTGRES.admin_user)
    }

    fn mint(&self, agent: &Credentials, facts: ServerFacts) -> Vec<AdminStep> {
        let role = pg_identifier(&agent.user);
        let database = pg_identifier(POSTGRES.agent_database);
        // One transaction in the agent's database (roles and database owners are cluster-wide),
        // so a held superuser connection there mints the account in one round trip.
        vec![AdminStep::Sql {
            database: Some(POSTGRES.agent_database.to_owned()),
            statement: SecretString::from(format!(
                "BEGIN; {}; ALTER DATABASE {database} OWNER TO {role}; \
                 ALTER SCHEMA public OWNER TO {role}; COMMIT",
                create_role(agent, facts)
            )),
        }]
    }

    fn reset(&self, agent: &Credentials, facts: ServerFacts) -> ResetPlan {
        ResetPlan::AgentCluster(AgentCluster {
            agent_role: agent.user.clone(),
            // `postgres` is the admin database; the templates are the server's own (what the
            // agent's roles own in them, a large object say, goes with the roles).
            keep_databases: [POSTGRES.admin_database, "template0", "template1"]
                .map(str::to_owned)
                .to_vec(),
            keep_roles: vec![POSTGRES.admin_user.to_owned(), agent.user.clone()],
            agent_database: POSTGRES.agent_database.to_owned(),
            recreate: database_steps(&agent.user),
            restore_agent: vec![AdminStep::Sql {
                database: None,
                statement: SecretString::from(restore_role(agent, facts)),
            }],
        })
    }
}

/// The attributes of the handed-out account, after `CREATE ROLE` or `ALTER ROLE`.
fn role_attributes(agent: &Credentials, facts: ServerFacts) -> String {
    // CREATEROLE cannot escalate from PostgreSQL 16 on; before that it could grant itself any
    // non-superuser role, including the pg_* server roles.
    let createrole = if facts.major_version.is_some_and(|major| major >= 16) {
        " CREATEROLE"
    } else {
        " NOCREATEROLE"
    };
    // A SCRAM verifier, never the password: the statement may be logged by a driver.
    let password = sql_literal(&pg_scram_verifier(&agent.password));
    format!(
        "LOGIN CREATEDB{createrole} NOSUPERUSER NOREPLICATION NOBYPASSRLS INHERIT \
         CONNECTION LIMIT -1 PASSWORD {password}"
    )
}

/// The handed-out account as it was handed out, whatever the agent changed on it (its
/// password, its connection limit, its role settings): the end of every reset.
fn restore_role(agent: &Credentials, facts: ServerFacts) -> String {
    let role = pg_identifier(&agent.user);
    format!(
        "ALTER ROLE {role} {} VALID UNTIL 'infinity'; ALTER ROLE {role} RESET ALL",
        role_attributes(agent, facts)
    )
}

/// `CREATE ROLE` for the handed-out account.
fn create_role(agent: &Credentials, facts: ServerFacts) -> String {
    format!(
        "CREATE ROLE {} {}",
        pg_identifier(&agent.user),
        role_attributes(agent, facts)
    )
}

/// The agent's database as `setup` makes it (and `reset` makes it again): owned by the agent,
/// with the superuser's `extensions` schema on its search path.
fn database_steps(agent_user: &str) -> Vec<AdminStep> {
    let role = pg_identifier(agent_user);
    let database = pg_identifier(POSTGRES.agent_database);
    let extensions = pg_identifier(PG_EXTENSION_SCHEMA);
    vec![
        AdminStep::Sql {
            database: None,
            statement: SecretString::from(format!("CREATE DATABASE {database} OWNER {role}")),
        },
        AdminStep::Sql {
            database: Some(POSTGRES.agent_database.to_owned()),
            statement: SecretString::from(format!("ALTER SCHEMA public OWNER TO {role}")),
        },
        // Before the agent gets access: the schema allowlisted extensions go into is the
        // superuser's, so the agent can neither claim its name nor plant objects in it.
        AdminStep::Sql {
            database: Some(POSTGRES.agent_database.to_owned()),
            statement: SecretString::from(format!(
                "CREATE SCHEMA IF NOT EXISTS {extensions}; \
                     GRANT USAGE ON SCHEMA {extensions} TO PUBLIC"
            )),
        },
        AdminStep::Sql {
            database: None,
            statement: SecretString::from(format!(
                "ALTER DATABASE {database} SET search_path = \"$user\", public, {extensions}"
            )),
        },
    ]
}

fn template(ctx: &ProcessContext<'_>) -> TemplatePlan {
    TemplatePlan {
        commands: vec![CommandPlan {
            program: ctx.programs["initdb"].clone(),
            args: vec![
                format!("--pgdata={}", ctx.data_dir.display()),
                format!("--username={}", POSTGRES.admin_user),
                "--auth-local=peer".into(),
                "--auth-host=scram-sha-256".into(),
                "--encoding=UTF8".into(),
                "--locale=C.UTF-8".into(),
                "--no-sync".into(),
                "--no-instructions".into(),
            ],
        }],
        files: vec![
            PlannedFile {
                relative_path: "pg_hba.conf",
                // The superuser only over the private socket, and only for the OS user the
                // daemon runs as (peer authentication through the `sandboxd` ident map): not the
                // instance's own uid, nor any other. Over TCP the superuser is refused outright
                // and everyone else needs a password.
                content: SecretString::from(format!(
                    "local all {admin} peer map=sandboxd\n\
                     local all all reject\n\
                     host all {admin} all reject\n\
                     host all all 127.0.0.1/32 scram-sha-256\n\
                     host all all ::1/128 scram-sha-256\n",
                    admin = POSTGRES.admin_user
                )),
            },
            PlannedFile {
                relative_path: "pg_ident.conf",
                content: SecretString::from(format!(
                    "sandboxd {daemon} {admin}\n",
                    daemon = ctx.daemon_user,
                    admin = POSTGRES.admin_user
                )),
            },
        ],
    }
}

/// WAL and temporary-file settings sized to the instance's space: `pg_wal` (its own mount of
/// `wal_mb`) stays far below its cap between checkpoints, and one query's temporary files cannot
/// take more than a quarter of the data space. Filling the data space then fails the statement
/// (`could not extend file`), never a WAL write (which would be a PANIC).
fn space_settings(data_mb: u64, wal_mb: u64) -> Vec<String> {
    // Two 16 MB segments is the least Postgres accepts.
    let max_wal = (wal_mb / 4).max(32);
    vec![
        format!("max_wal_size={max_wal}MB"),
        "min_wal_size=32MB".to_owned(),
        "wal_keep_size=0".to_owned(),
        "checkpoint_completion_target=0.5".to_owned(),
        format!("temp_file_limit={}MB", (data_mb / 4).max(1)),
    ]
}

fn launch(ctx: &ProcessContext<'_>) -> (CommandPlan, Vec<PlannedFile>) {
    let mut args = vec![
        "-D".to_owned(),
        ctx.data_dir.display().to_string(),
        "-p".to_owned(),
        ctx.port.to_string(),
        "-k".to_owned(),
        ctx.socket_dir.display().to_string(),
        "-c".to_owned(),
        "listen_addresses=127.0.0.1".to_owned(),
        "-c".to_owned(),
        "unix_socket_permissions=0700".to_owned(),
        "-c".to_owned(),
        "shared_buffers=32MB".to_owned(),
    ];
    for setting in THROWAWAY_SETTINGS {
        args.push("-c".to_owned());
        args.push((*setting).to_owned());
    }
    for setting in space_settings(ctx.data_limit_mb, ctx.wal_limit_mb) {
        args.push("-c".to_owned());
        args.push(setting);
    }
    let plan = CommandPlan {
        program: ctx.programs["postgres"].clone(),
        args,
    };
    (plan, vec![])
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn statements(steps: &[AdminStep]) -> Vec<(Option<String>, String)> {
        steps
            .iter()
            .map(|step| match step {
                AdminStep::Sql {
                    database,
                    statement,
                } => (database.clone(), statement.expose_secret().to_owned()),
                other => panic!("Postgres steps are SQL: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_pool_member_is_prepared_without_any_agent_account() {
        let prepared = statements(&Postgres.pool_prepare());
        let all = prepared
            .iter()
            .map(|(_, s)| s.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        assert!(
            all.contains("CREATE DATABASE \"sandbox\" OWNER \"sandboxd_admin\""),
            "{all}"
        );
        assert!(!all.contains("CREATE ROLE"), "{all}");
    }

    #[test]
    fn minting_is_one_transaction_in_the_agent_database_with_a_verifier_only() {
        let agent = Credentials::generate("sandbox");
        let facts = ServerFacts {
            major_version: Some(17),
        };
        let minted = statements(&Postgres.mint(&agent, facts));
        assert_eq!(minted.len(), 1, "{minted:?}");
        let (database, sql) = &minted[0];
        assert_eq!(database.as_deref(), Some("sandbox"));
        assert!(sql.starts_with("BEGIN; CREATE ROLE \"sandbox\" LOGIN CREATEDB CREATEROLE"));
        assert!(sql.contains("ALTER DATABASE \"sandbox\" OWNER TO \"sandbox\""));
        assert!(sql.contains("ALTER SCHEMA public OWNER TO \"sandbox\""));
        assert!(sql.ends_with("COMMIT"));
        assert!(sql.contains("SCRAM-SHA-256$4096:"));
        assert!(
            !sql.contains(agent.password.expose_secret()),
            "the password itself"
        );
        // Before 16, CREATEROLE could escalate: not granted.
        let old = statements(&Postgres.mint(
            &agent,
            ServerFacts {
                major_version: Some(15),
            },
        ));
        assert!(old[0].1.contains(" NOCREATEROLE "), "{}", old[0].1);
    }

    #[test]
    fn a_reset_keeps_only_what_the_daemon_made_and_restores_the_account() {
        let agent = Credentials::generate("sandbox");
        let facts = ServerFacts {
            major_version: Some(16),
        };
        let ResetPlan::AgentCluster(plan) = Postgres.reset(&agent, facts) else {
            panic!("Postgres resets its cluster");
        };
        assert_eq!(plan.keep_roles, ["sandboxd_admin", "sandbox"]);
        assert_eq!(plan.keep_databases, ["postgres", "template0", "template1"]);
        assert_eq!(plan.agent_database, "sandbox");
        let restore = statements(&plan.restore_agent);
        let (database, sql) = &restore[0];
        assert_eq!(database, &None);
        assert!(
            sql.starts_with("ALTER ROLE \"sandbox\" LOGIN CREATEDB CREATEROLE NOSUPERUSER"),
            "{sql}"
        );
        assert!(sql.contains("CONNECTION LIMIT -1"), "{sql}");
        assert!(sql.ends_with("ALTER ROLE \"sandbox\" RESET ALL"), "{sql}");
        assert!(
            !sql.contains(agent.password.expose_secret()),
            "the password itself"
        );
        let recreated = statements(&plan.recreate);
        assert!(
            recreated[0]
                .1
                .contains("CREATE DATABASE \"sandbox\" OWNER \"sandbox\""),
            "{recreated:?}"
        );
        // A reset makes the database again as setup did.
        assert_eq!(recreated, statements(&database_steps("sandbox")));
    }
}
