//! A superuser connection held open to a warm-pool member, so handing the member out costs the
//! mint's statements and not a superuser login (a fresh Postgres connection is ~30 ms, the mint
//! itself ~4 ms). Postgres and Redis hold one; the other protocols connect per step.

use sandboxd_domain::engine::{AdminAccess, AdminStep, ServerFacts};
use sandboxd_domain::{EngineRef, Protocol};

use secrecy::SecretString;

use super::{Reach, WireError, account, postgres, redis};

enum Held {
    Postgres {
        database: String,
        client: tokio_postgres::Client,
    },
    Redis(::redis::aio::MultiplexedConnection),
    /// Connects for every step.
    Nothing,
}

pub struct AdminSession {
    engine: EngineRef,
    admin: AdminAccess,
    host: String,
    port: u16,
    held: Held,
}

impl std::fmt::Debug for AdminSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminSession")
            .field("engine", &self.engine.name)
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl AdminSession {
    /// Logs in as superuser, into `database` where the protocol has databases.
    pub async fn open(
        engine: EngineRef,
        admin: &AdminAccess,
        reach: Reach<'_>,
        database: &str,
    ) -> Result<Self, WireError> {
        let held = match engine.protocol {
            Protocol::Postgres => Held::Postgres {
                database: database.to_owned(),
                client: postgres::connect_admin(admin, reach, database).await?,
            },
            Protocol::Redis => Held::Redis(redis::connect_admin(admin, reach).await?),
            Protocol::Mysql | Protocol::Mongo => Held::Nothing,
        };
        Ok(Self {
            engine,
            admin: admin.clone(),
            host: reach.host.to_owned(),
            port: reach.port,
            held,
        })
    }

    fn reach(&self) -> Reach<'_> {
        Reach {
            host: &self.host,
            port: self.port,
        }
    }

    /// What the server says it is.
    pub async fn facts(&self) -> Result<ServerFacts, WireError> {
        super::server_facts(self.engine.get(), &self.admin, self.reach()).await
    }

    /// One round trip: the server is there and still knows the superuser.
    pub async fn check(&mut self) -> Result<(), WireError> {
        match &mut self.held {
            Held::Postgres { client, .. } => postgres::ping(client).await,
            Held::Redis(conn) => redis::ping(conn).await,
            Held::Nothing => self.facts().await.map(drop),
        }
    }

    /// Whether this session is one connection held open (Postgres, Redis): only then does a
    /// reply on it prove that the server was not restarted since it was opened.
    pub fn holds_connection(&self) -> bool {
        !matches!(self.held, Held::Nothing)
    }

    /// What `user`'s account is on the server, as text to compare (`account.rs`); None where
    /// the session holds no connection.
    pub async fn account_state(&mut self, user: &str) -> Result<Option<SecretString>, WireError> {
        match &mut self.held {
            Held::Postgres { client, .. } => account::of_postgres(client, user).await.map(Some),
            Held::Redis(conn) => account::of_redis(conn, user).await.map(Some),
            Held::Nothing => Ok(None),
        }
    }

    /// Runs `steps` in order, on the held connection where it serves them.
    pub async fn run(&mut self, steps: &[AdminStep]) -> Result<(), WireError> {
        for step in steps {
            match (&mut self.held, step) {
                (
                    Held::Postgres { database, client },
                    AdminStep::Sql {
                        database: Some(wanted),
                        statement,
                    },
                ) if wanted == database => postgres::execute(client, statement).await?,
                (Held::Redis(conn), AdminStep::RedisCommand { words }) => {
                    redis::command(conn, words).await?;
                }
                _ => {
                    let reach = Reach {
                        host: &self.host,
                        port: self.port,
                    };
                    super::run_step(self.engine.get(), Some(&self.admin), reach, step).await?;
                }
            }
        }
        Ok(())
    }
}
