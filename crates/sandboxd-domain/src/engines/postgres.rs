//! PostgreSQL: the official image's contract (`POSTGRES_*`), Debian's packages for processes, and
//! a handed-out role that owns its database and can create databases but holds no superuser power.

use std::time::Duration;

use secrecy::SecretString;

use crate::credentials::{Credentials, pg_scram_verifier};
use crate::engine::{
    Activation, AdminAccess, AdminStep, AgentCluster, CommandPlan, ContainerRecipe,
    ContainerSecret, Engine, EngineRecipes, FeatureKind, FeatureSpec, PG_DEFAULT_SEARCH_PATH,
    PG_TEMPLATE_DATABASE, PlannedFile, ProcessContext, ProcessRecipe, Protocol, ResetPlan,
    ServerFacts, Signal, TemplatePlan, Tmpfs, pg_extension_if_available, pg_extension_schema,
    pg_identifier, sql_literal,
};
use crate::engine::{EnvRendering, UrlPath};
use crate::space::DataSize;

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
/// Room for `max_wal_size` plus the segments written while a checkpoint catches up.
const WAL_MB: u64 = 96;

/// Sized to the container's tmpfs mounts: WAL is recycled well below `WAL_MB`, and shared
/// buffers stay small because the tmpfs pages count against the same memory cap. Temporary
/// files (sorts, hashes) are capped below the data tmpfs by [`container_temp_limit`].
const CONTAINER_SPACE_SETTINGS: &[&str] = &[
    "shared_buffers=32MB",
    "min_wal_size=32MB",
    "max_wal_size=48MB",
];

/// One query's temporary files take at most a quarter of the data tmpfs (64 MB of the default
/// 256 MB), so a huge sort fails on `temp_file_limit` while the data space has room.
fn container_temp_limit(size: DataSize) -> String {
    format!("temp_file_limit={}MB", (size.mb() / 4).max(1))
}

static FEATURES: &[FeatureSpec] = &[
    FeatureSpec {
        name: "vector",
        summary: "pgvector: vector type and similarity search",
        activation: Activation::PgExtension {
            extension: "vector",
            companions: &[],
            package: "postgresql-{major}-pgvector",
        },
    },
    FeatureSpec {
        name: "postgis",
        summary: "PostGIS: geometry and geography types",
        activation: Activation::PgExtension {
            extension: "postgis",
            // GeoDjango's test suite creates it (PostGIS 3 moved rasters out of `postgis`). Its
            // reach outside the database (out-of-database rasters, GDAL's drivers) is off and
            // only a superuser may turn it on (`postgis.enable_outdb_rasters`,
            // `postgis.gdal_enabled_drivers`).
            companions: &["postgis_raster"],
            package: "postgresql-{major}-postgis-3",
        },
    },
    FeatureSpec {
        name: "pg_trgm",
        summary: "trigram matching for LIKE/ILIKE indexes",
        activation: Activation::PgExtension {
            extension: "pg_trgm",
            companions: &[],
            package: "postgresql-contrib",
        },
    },
    FeatureSpec {
        name: "citext",
        summary: "case-insensitive text type",
        activation: Activation::PgExtension {
            extension: "citext",
            companions: &[],
            package: "postgresql-contrib",
        },
    },
    FeatureSpec {
        name: "uuid-ossp",
        summary: "UUID generation functions",
        activation: Activation::PgExtension {
            extension: "uuid-ossp",
            companions: &[],
            package: "postgresql-contrib",
        },
    },
];

/// Extensions only a superuser may create that test suites create as a matter of course, made
/// by the daemon in `template1` and the agent's database wherever the server has them, so the
/// suite's `CREATE EXTENSION IF NOT EXISTS` finds them made: `bloom` (Django's `postgres_tests`
/// creates it in its first migration). Each one is an index method and its operator classes
/// only: no file, program or network access, no function only a superuser may call. (The
/// trusted ones suites create, `hstore`, `citext`, `btree_gist`, `pgcrypto`, …, the agent's
/// role creates itself; `postgres_fdw` and `dblink`, which Rails' suite tries, reach other
/// hosts and stay out.)
const PREINSTALLED_EXTENSIONS: &[&str] = &["bloom"];

/// Settings that trade durability for start and test speed; a sandbox is thrown away anyway.
/// Two-phase commit is on for the suites that test it (SQLAlchemy's): each slot of
/// `max_prepared_transactions` costs a few hundred bytes of shared memory and a share of the
/// lock table, and a reset rolls back whatever was left prepared.
const THROWAWAY_SETTINGS: &[&str] = &[
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=100",
    "max_prepared_transactions=10",
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
    data_on_disk: true,
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

/// The databases a reset never drops: the admin database and the server's templates (a
/// clone's database cannot take one of their names).
pub fn kept_databases() -> Vec<String> {
    [POSTGRES.admin_database, "template0", PG_TEMPLATE_DATABASE]
        .map(str::to_owned)
        .to_vec()
}
impl EngineRecipes for Postgres {
    fn container(
        &self,
        admin: &Credentials,
        _agent: &Credentials,
        size: DataSize,
    ) -> ContainerRecipe {
        let mut command = vec!["postgres".to_owned()];
        let settings = THROWAWAY_SETTINGS.iter().chain(CONTAINER_SPACE_SETTINGS);
        for setting in settings
            .map(|s| (*s).to_owned())
            .chain([container_temp_limit(size)])
        {
            command.push("-c".to_owned());
            command.push(setting);
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
                    size_mb: size.mb(),
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
        steps.extend(database_steps(&agent.user, POSTGRES.agent_database));
        steps
    }

    fn pool_prepare(&self) -> Vec<AdminStep> {
        // The agent's database, owned by the superuser until `mint` hands it over.
        database_steps(POSTGRES.admin_user, POSTGRES.agent_database)
    }

    fn mint(
        &self,
        agent: &Credentials,
        facts: ServerFacts,
        agent_database: &str,
    ) -> Vec<AdminStep> {
        let role = pg_identifier(&agent.user);
        let database = pg_identifier(agent_database);
        // One transaction in the agent's database (roles and database owners are cluster-wide),
        // so a held superuser connection there mints the account in one round trip.
        vec![AdminStep::Sql {
            database: Some(agent_database.to_owned()),
            statement: SecretString::from(format!(
                "BEGIN; {}; ALTER DATABASE {database} OWNER TO {role}; \
                 ALTER SCHEMA public OWNER TO {role}; COMMIT",
                create_role(agent, facts)
            )),
        }]
    }

    fn reset(&self, agent: &Credentials, facts: ServerFacts, agent_database: &str) -> ResetPlan {
        ResetPlan::AgentCluster(AgentCluster {
            agent_role: agent.user.clone(),
            // `postgres` is the admin database; the templates are the server's own. The agent
            // cannot change `template1` (it creates nothing there; what its roles own there, a
            // large object say, goes with them), and the features added in place since are
            // meant to be there: it is kept as it is, and `recreate` copies it.
            keep_databases: kept_databases(),
            keep_roles: vec![POSTGRES.admin_user.to_owned(), agent.user.clone()],
            agent_database: agent_database.to_owned(),
            recreate: database_steps(&agent.user, agent_database),
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

/// `public` as PostgreSQL 15 and later make it: owned by the database's owner, CREATE for nobody
/// else. A no-op from 15 on; before 14, which has no `pg_database_owner`, nothing.
const PUBLIC_AS_IN_15: &str = "DO $sbx$ BEGIN \
       IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles \
                  WHERE rolname OPERATOR(pg_catalog.=) 'pg_database_owner') THEN \
         ALTER SCHEMA public OWNER TO pg_database_owner; \
         REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
       END IF; \
     END $sbx$";

/// The agent's database as `setup` makes it (and `reset` makes it again), and `template1` made
/// ready to be copied: the agent's database is owned by the agent, and both carry the
/// superuser's `extensions` schema (on every role's default `search_path`) and the pre-installed
/// extensions. The database is made first, so no session of the daemon's is still on
/// `template1` when it is copied (`CREATE DATABASE` waits for those to leave); a reset copies
/// the `template1` earlier steps prepared, whose features and pre-installed extensions the
/// database then has already. `agent_database` is `agent_database` of the engine, or the
/// source's name a clone's database was given.
fn database_steps(agent_user: &str, agent_database: &str) -> Vec<AdminStep> {
    let role = pg_identifier(agent_user);
    let database = pg_identifier(agent_database);
    let preinstalled = || {
        PREINSTALLED_EXTENSIONS
            .iter()
            .map(|extension| pg_extension_if_available(extension))
            .collect::<Vec<_>>()
    };
    // The daemon's alone: nobody else may create anything in `template1`. The agent may
    // connect to it, but it creates no schema there and the extension schema is the
    // superuser's; `public` is made what PostgreSQL 15 made it, the database owner's (the
    // superuser's here, the agent's in a copy) with no CREATE for everyone else — older
    // servers granted that to everyone, and a clone may run one. (Before 14 there is no
    // `pg_database_owner` and `public` stays as it is: nothing the daemon runs in `template1`
    // resolves a name through it.)
    let template = [PUBLIC_AS_IN_15.to_owned(), pg_extension_schema()]
        .into_iter()
        .chain(preinstalled())
        .chain([format!(
            "ALTER ROLE ALL SET search_path = {PG_DEFAULT_SEARCH_PATH}"
        )]);
    // Before the agent gets access: the schema extensions go into is the superuser's, so the
    // agent can neither claim its name nor plant objects in it.
    let agent_steps = [
        format!("ALTER SCHEMA public OWNER TO {role}"),
        pg_extension_schema(),
    ]
    .into_iter()
    .chain(preinstalled());
    let sql = |database: Option<&str>, statements: Vec<String>| AdminStep::Sql {
        database: database.map(str::to_owned),
        statement: SecretString::from(statements.join("; ")),
    };
    vec![
        sql(
            None,
            vec![format!("CREATE DATABASE {database} OWNER {role}")],
        ),
        sql(Some(PG_TEMPLATE_DATABASE), template.collect()),
        sql(Some(agent_database), agent_steps.collect()),
    ]
}

fn template(ctx: &ProcessContext<'_>) -> TemplatePlan {
    TemplatePlan {
        outputs: vec![],
        commands: vec![CommandPlan {
            program: ctx.programs["initdb"].clone(),
            args: vec![
                format!("--pgdata={}", ctx.data_dir.display()),
                format!("--username={}", POSTGRES.admin_user),
                "--auth-local=peer".into(),
                "--auth-host=scram-sha-256".into(),
                "--encoding=UTF8".into(),
                // Code-point order, as the official Alpine image's musl locale sorts. initdb
                // makes every locale the host has a collation too (`en_US.utf8` once
                // scripts/install-deps.sh generated it; the template is rebuilt when the host's
                // locales change).
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
        let minted = statements(&Postgres.mint(&agent, facts, "sandbox"));
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
            "sandbox",
        ));
        assert!(old[0].1.contains(" NOCREATEROLE "), "{}", old[0].1);
    }

    #[test]
    fn a_reset_keeps_only_what_the_daemon_made_and_restores_the_account() {
        let agent = Credentials::generate("sandbox");
        let facts = ServerFacts {
            major_version: Some(16),
        };
        let ResetPlan::AgentCluster(plan) = Postgres.reset(&agent, facts, "sandbox") else {
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
        // A reset makes template1 ready again too, as setup did.
        assert_eq!(recreated, statements(&database_steps("sandbox", "sandbox")));
    }

    #[test]
    fn a_clone_named_after_its_source_is_reset_and_minted_under_that_name_quoted() {
        let agent = Credentials::generate("sandbox");
        let facts = ServerFacts {
            major_version: Some(18),
        };
        let odd = "Prod \"Shop\" 2";
        let quoted = "\"Prod \"\"Shop\"\" 2\"";
        let ResetPlan::AgentCluster(plan) = Postgres.reset(&agent, facts, odd) else {
            panic!("Postgres resets its cluster");
        };
        assert_eq!(plan.agent_database, odd);
        assert_eq!(plan.keep_databases, ["postgres", "template0", "template1"]);
        let recreated = statements(&plan.recreate);
        assert!(
            recreated[0]
                .1
                .contains(&format!("CREATE DATABASE {quoted} OWNER \"sandbox\"")),
            "{recreated:?}"
        );
        assert_eq!(recreated[2].0.as_deref(), Some(odd), "{recreated:?}");
        let minted = statements(&Postgres.mint(&agent, facts, odd));
        assert_eq!(minted[0].0.as_deref(), Some(odd));
        assert!(
            minted[0]
                .1
                .contains(&format!("ALTER DATABASE {quoted} OWNER TO \"sandbox\"")),
            "{}",
            minted[0].1
        );
    }

    #[test]
    fn template1_is_prepared_after_the_agent_database_is_copied_from_it() {
        let agent = Credentials::generate("sandbox");
        let facts = ServerFacts {
            major_version: Some(15),
        };
        let steps = statements(&Postgres.setup(&agent, facts));
        let databases: Vec<Option<&str>> = steps.iter().map(|(d, _)| d.as_deref()).collect();
        // The role, the database (a copy of template1), then template1, then the database.
        assert_eq!(databases, [None, None, Some("template1"), Some("sandbox")]);
        assert!(
            steps[1].1.starts_with("CREATE DATABASE \"sandbox\""),
            "{steps:?}"
        );
        let template = &steps[2].1;
        assert!(template.starts_with(PUBLIC_AS_IN_15), "{template}");
        assert!(
            template.contains("REVOKE CREATE ON SCHEMA public FROM PUBLIC"),
            "{template}"
        );
        assert!(
            template.ends_with("ALTER ROLE ALL SET search_path = \"$user\", public, extensions"),
            "{template}"
        );
        let agent_database = &steps[3].1;
        assert!(
            agent_database.starts_with("ALTER SCHEMA public OWNER TO \"sandbox\"; "),
            "{agent_database}"
        );
        for sql in [template, agent_database] {
            // The superuser's schema, checked, then bloom where the server has it.
            assert!(sql.contains("is not owned by the superuser"), "{sql}");
            assert!(
                sql.contains(
                    "CREATE EXTENSION IF NOT EXISTS \"bloom\" SCHEMA \"extensions\" CASCADE"
                ),
                "{sql}"
            );
            assert!(
                sql.contains("FROM pg_catalog.pg_available_extensions"),
                "{sql}"
            );
        }
        // No database-level search_path any more: the role-wide default reaches every
        // database the agent makes.
        assert!(!steps.iter().any(|(_, sql)| sql.contains("ALTER DATABASE")));
    }

    #[test]
    fn postgis_brings_its_raster_types_where_the_server_has_them() {
        let postgis = POSTGRES.feature("postgis").expect("allowlisted");
        let Activation::PgExtension {
            extension,
            companions,
            ..
        } = postgis.activation
        else {
            panic!("an extension");
        };
        let sql = crate::engine::pg_extension_activation(extension, companions);
        let main = sql
            .find("CREATE EXTENSION IF NOT EXISTS \"postgis\" SCHEMA \"extensions\" CASCADE")
            .expect("postgis itself");
        let raster = sql
            .find("WHERE name OPERATOR(pg_catalog.=) 'postgis_raster'")
            .expect("postgis_raster where available");
        assert!(main < raster, "{sql}");
        assert!(
            sql.starts_with("DO $sbx$"),
            "the schema is checked first: {sql}"
        );
    }
}
