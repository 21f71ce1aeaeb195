//! MongoDB: the official `mongo` image's contract (`MONGO_INITDB_ROOT_*`), server-side JavaScript
//! off, a small WiredTiger cache, and a handed-out user that can create, use and drop databases
//! but holds no cluster-admin or root role. Debian ships no mongod; the process form is used only
//! when an operator installed one.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use crate::credentials::Credentials;
use crate::engine::{
    AdminAccess, AdminStep, CommandPlan, ContainerRecipe, ContainerSecret, Engine, EngineRecipes,
    EnvRendering, FeatureKind, PlannedFile, ProcessContext, ProcessRecipe, Protocol, ResetPlan,
    ServerFacts, Signal, Tmpfs, UrlPath,
};
use crate::space::DataSize;

#[derive(Debug, Default)]
pub struct Mongo;

const SERVER_ARGS: &[&str] = &["--noscripting", "--wiredTigerCacheSizeGB", "0.25"];

pub static MONGO: Engine = Engine {
    name: "mongo",
    title: "MongoDB",
    protocol: Protocol::Mongo,
    images: &["mongo:8"],
    port: 27017,
    readiness_deadline: Duration::from_secs(60),
    feature_kind: FeatureKind::Extension,
    features: &[],
    admin_user: "sandboxd_admin",
    admin_database: "",
    agent_user: "sandbox",
    agent_database: "sandbox",
    data_on_disk: true,
    env: EnvRendering {
        scheme: "mongodb",
        path: UrlPath::Database,
        query: "?authSource=admin",
        url_var: "MONGODB_URI",
        host_var: "MONGO_HOST",
        port_var: "MONGO_PORT",
        user_var: "MONGO_USER",
        password_var: "MONGO_PASSWORD",
        database_var: Some("MONGO_DB"),
    },
    recipes: &Mongo,
};

impl EngineRecipes for Mongo {
    fn container(
        &self,
        admin: &Credentials,
        _agent: &Credentials,
        size: DataSize,
    ) -> ContainerRecipe {
        let mut command = vec!["mongod".to_owned()];
        command.extend(SERVER_ARGS.iter().map(|a| (*a).to_owned()));
        ContainerRecipe {
            env: vec![("MONGO_INITDB_ROOT_USERNAME".into(), admin.user.clone())],
            secret: Some(ContainerSecret {
                var: "MONGO_INITDB_ROOT_PASSWORD",
                value: admin.password.clone(),
            }),
            command,
            user: Some("mongodb"),
            tmpfs: vec![
                Tmpfs {
                    path: "/data/db",
                    size_mb: size.mb(),
                    mode: "1777",
                    uid: Some(999),
                },
                Tmpfs {
                    path: "/data/configdb",
                    size_mb: 16,
                    mode: "1777",
                    uid: Some(999),
                },
                Tmpfs {
                    path: "/tmp",
                    size_mb: 16,
                    mode: "1777",
                    uid: Some(999),
                },
            ],
            capabilities: vec![],
        }
    }

    fn process(&self) -> Option<ProcessRecipe> {
        Some(ProcessRecipe {
            package: "mongodb-org-server and mongodb-mongosh from MongoDB's apt repository (Debian ships no mongod)",
            programs: &["mongod", "mongosh"],
            search_dirs: &["/usr/bin"],
            template: None,
            launch,
            admin: |ctx| AdminAccess::Password(ctx.admin.clone()),
            bootstrap: Some(create_admin),
            graceful_signal: Signal::Term,
            wal_dir: None,
        })
    }

    fn setup(&self, agent: &Credentials, _facts: ServerFacts) -> Vec<AdminStep> {
        let command = serde_json::json!({
            "createUser": agent.user,
            "pwd": agent.password.expose_secret(),
            "roles": [
                { "role": "readWriteAnyDatabase", "db": "admin" },
                { "role": "dbAdminAnyDatabase", "db": "admin" },
            ],
        });
        vec![AdminStep::MongoCommand {
            database: "admin".to_owned(),
            command: SecretString::from(command.to_string()),
        }]
    }

    fn reset(&self, _agent: &Credentials, _facts: ServerFacts, _database: &str) -> ResetPlan {
        ResetPlan::Unsupported(
            "MongoDB sandboxes are not reset in place yet; release_sandbox and request_sandbox \
             give a fresh one (with new credentials)",
        )
    }
}

/// A fresh `mongod --auth` has no user; its localhost exception lets the first one be created.
fn create_admin(ctx: &ProcessContext<'_>) -> Vec<AdminStep> {
    let command = serde_json::json!({
        "createUser": ctx.admin.user,
        "pwd": ctx.admin.password.expose_secret(),
        "roles": [{ "role": "root", "db": "admin" }],
    });
    vec![AdminStep::MongoCommand {
        database: "admin".to_owned(),
        command: SecretString::from(command.to_string()),
    }]
}

fn launch(ctx: &ProcessContext<'_>) -> (CommandPlan, Vec<PlannedFile>) {
    let mut args = vec![
        "--dbpath".to_owned(),
        ctx.data_dir.display().to_string(),
        "--port".to_owned(),
        ctx.port.to_string(),
        "--bind_ip".to_owned(),
        "127.0.0.1".to_owned(),
        "--unixSocketPrefix".to_owned(),
        ctx.socket_dir.display().to_string(),
        "--auth".to_owned(),
    ];
    args.extend(SERVER_ARGS.iter().map(|a| (*a).to_owned()));
    (
        CommandPlan {
            program: ctx.programs["mongod"].clone(),
            args,
        },
        vec![],
    )
}
