//! Faults a test injects into a warm-pool member while it idles.

use sandboxd_backend::wire::{AdminSession, Reach};
use sandboxd_domain::Instance;
use sandboxd_domain::engine::AdminStep;
use secrecy::SecretString;

/// Takes the login from `instance`'s handed-out account (Postgres `NOLOGIN`, Redis `off`), as
/// superuser over a connection of its own: the pool's held connection and the member's proof
/// know nothing of it, as after an operator's (or a bug's) change.
pub async fn forbid_login(instance: &Instance) {
    let reach = Reach {
        host: &instance.host,
        port: instance.port,
    };
    let mut session =
        AdminSession::open(instance.engine, &instance.admin, reach, &instance.database)
            .await
            .expect("a superuser session");
    let step = match instance.engine.name {
        "postgres" => AdminStep::Sql {
            database: Some(instance.database.clone()),
            statement: SecretString::from("ALTER ROLE sandbox NOLOGIN"),
        },
        "redis" => AdminStep::RedisCommand {
            words: ["ACL", "SETUSER", "sandbox", "off"]
                .map(SecretString::from)
                .to_vec(),
        },
        other => panic!("no login to forbid on {other}"),
    };
    session.run(&[step]).await.expect("the account changed");
}
