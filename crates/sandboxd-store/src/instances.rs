//! The broker's sandbox cache, persisted: one row per live service instance, so a daemon restart
//! does not forget live sandboxes (§4.4).
//!
//! Everything but the credentials is stored as plain columns (the panel and the janitor read
//! them through [`InstanceSummary`] without ever touching a secret). The agent's password and the
//! superuser access are one JSON blob sealed by the store's [`SecretCipher`](crate::SecretCipher)
//! and bound to the row's name; only [`Store::instances_of`] and [`Store::all_instances`] open
//! it, and a wrong key is a [`StoreError::Decrypt`], never garbage credentials.

use std::collections::BTreeSet;
use std::path::PathBuf;

use sandboxd_domain::clock::now_ms;
use sandboxd_domain::engine::AdminAccess;
use sandboxd_domain::{
    AgentSlug, BackendKind, Credentials, DataSize, EngineRef, Feature, Instance,
};
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::error::{Result, StoreError, Violation, violation};

/// One stored instance without its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSummary {
    /// `sandboxd-<engine>-<owner>-<maker>`.
    pub name: String,
    pub owner: AgentSlug,
    pub engine: EngineRef,
    pub backend: BackendKind,
    /// Container id, or the instance directory of a process.
    pub backend_id: String,
    pub host: String,
    pub port: u16,
    pub database: String,
    /// The handed-out user's name (not a secret).
    pub user: String,
    pub features: BTreeSet<Feature>,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    /// When the owner last got this sandbox (provisioned or a cache hit), Unix milliseconds.
    pub last_used_at_ms: i64,
}

/// The sealed part, as written.
#[derive(Serialize)]
struct SealRef<'a> {
    agent_password: &'a str,
    admin: AdminRef<'a>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum AdminRef<'a> {
    Password { user: &'a str, password: &'a str },
    Socket { directory: &'a str, user: &'a str },
}

/// The sealed part, as read back.
#[derive(Deserialize)]
struct Sealed {
    agent_password: String,
    admin: AdminOwned,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum AdminOwned {
    Password { user: String, password: String },
    Socket { directory: String, user: String },
}

const COLUMNS: &str = "name, owner, engine, backend, backend_id, host, port, database_name, \
                       agent_user, features, created_at_ms, sealed_credentials, last_used_at_ms, \
                       clone_origin, size_mb";

fn summary_from_row(op: &'static str, row: &AnyRow) -> Result<InstanceSummary> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let name: String = row.try_get("name").map_err(get)?;
    let what = |column: &str| format!("{column} of sandbox instance {name:?}");
    let corrupt = |column: &str, detail: &dyn std::fmt::Display| {
        StoreError::corrupt(op, what(column), detail)
    };

    let owner: String = row.try_get("owner").map_err(get)?;
    let owner = AgentSlug::parse(&owner).map_err(|e| corrupt("owner", &e))?;
    let engine: String = row.try_get("engine").map_err(get)?;
    let engine = EngineRef::parse(&engine).map_err(|e| corrupt("engine", &e))?;
    let backend: String = row.try_get("backend").map_err(get)?;
    let backend = BackendKind::parse(&backend)
        .ok_or_else(|| corrupt("backend", &format!("unknown backend {backend:?}")))?;
    let port: i64 = row.try_get("port").map_err(get)?;
    let port = u16::try_from(port).map_err(|e| corrupt("port", &e))?;
    let features: String = row.try_get("features").map_err(get)?;
    let features: Vec<String> =
        serde_json::from_str(&features).map_err(|e| corrupt("features", &e))?;
    let features = features
        .iter()
        .map(|f| Feature::parse(engine, f))
        .collect::<Result<BTreeSet<_>, _>>()
        .map_err(|e| corrupt("features", &e))?;
    Ok(InstanceSummary {
        owner,
        engine,
        backend,
        backend_id: row.try_get("backend_id").map_err(get)?,
        host: row.try_get("host").map_err(get)?,
        port,
        database: row.try_get("database_name").map_err(get)?,
        user: row.try_get("agent_user").map_err(get)?,
        features,
        created_at_ms: row.try_get("created_at_ms").map_err(get)?,
        last_used_at_ms: row.try_get("last_used_at_ms").map_err(get)?,
        name,
    })
}

impl Store {
    fn seal_credentials(&self, op: &'static str, instance: &Instance) -> Result<String> {
        let admin = match &instance.admin {
            AdminAccess::Password(creds) => AdminRef::Password {
                user: &creds.user,
                password: creds.password.expose_secret(),
            },
            AdminAccess::Socket { directory, user } => AdminRef::Socket {
                directory: directory.to_str().ok_or_else(|| StoreError::Invalid {
                    op,
                    detail: format!(
                        "the admin socket directory of {} is not UTF-8",
                        instance.name
                    ),
                })?,
                user,
            },
        };
        let blob = SealRef {
            agent_password: instance.agent.password.expose_secret(),
            admin,
        };
        let mut plaintext = Zeroizing::new(Vec::with_capacity(512));
        serde_json::to_writer(&mut *plaintext, &blob)
            .expect("a struct of strings always serializes");
        Ok(self.cipher.seal(&instance.name, &plaintext))
    }

    fn instance_from_row(&self, op: &'static str, row: &AnyRow) -> Result<Instance> {
        let summary = summary_from_row(op, row)?;
        let sealed: String = row
            .try_get("sealed_credentials")
            .map_err(StoreError::db(op))?;
        let plaintext =
            self.cipher
                .open(&summary.name, &sealed)
                .map_err(|_| StoreError::Decrypt {
                    op,
                    name: summary.name.clone(),
                })?;
        // Authenticated, so a parse failure here means a bug, not tampering; still no panic.
        let blob: Sealed = serde_json::from_slice(&plaintext).map_err(|_| {
            StoreError::corrupt(
                op,
                format!("sealed credentials of sandbox instance {:?}", summary.name),
                "the decrypted blob is not the expected JSON",
            )
        })?;
        let admin = match blob.admin {
            AdminOwned::Password { user, password } => AdminAccess::Password(Credentials {
                user,
                password: SecretString::from(password),
            }),
            AdminOwned::Socket { directory, user } => AdminAccess::Socket {
                directory: PathBuf::from(directory),
                user,
            },
        };
        let origin: Option<String> = row.try_get("clone_origin").map_err(StoreError::db(op))?;
        let clone = origin
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| {
                    StoreError::corrupt(
                        op,
                        format!("clone origin of sandbox instance {:?}", summary.name),
                        e,
                    )
                })
            })
            .transpose()?;
        let size_mb: Option<i64> = row.try_get("size_mb").map_err(StoreError::db(op))?;
        let size = size_mb
            .map(|mb| {
                u64::try_from(mb).map(DataSize::from_mb).map_err(|e| {
                    StoreError::corrupt(
                        op,
                        format!("size of sandbox instance {:?}", summary.name),
                        e,
                    )
                })
            })
            .transpose()?;
        Ok(Instance {
            engine: summary.engine,
            owner: summary.owner,
            // Only this store's daemon writes rows (`put_instances` refuses any other maker).
            maker: self.daemon.clone(),
            backend: summary.backend,
            backend_id: summary.backend_id,
            name: summary.name,
            host: summary.host,
            port: summary.port,
            database: summary.database,
            agent: Credentials {
                user: summary.user,
                password: SecretString::from(blob.agent_password),
            },
            admin,
            features: summary.features,
            created_at_ms: summary.created_at_ms,
            clone,
            size,
        })
    }

    /// Replaces `owner`'s stored instances with `instances`, in one transaction (an empty slice
    /// forgets them all). Every instance must belong to `owner`.
    pub async fn put_instances(&self, owner: &AgentSlug, instances: &[Instance]) -> Result<()> {
        const OP: &str = "put_instances";
        if let Some(stray) = instances.iter().find(|i| &i.owner != owner) {
            return Err(StoreError::Invalid {
                op: OP,
                detail: format!(
                    "instance {} belongs to {}, not to {owner}",
                    stray.name, stray.owner
                ),
            });
        }
        if let Some(stray) = instances.iter().find(|i| i.maker != self.daemon) {
            return Err(StoreError::Invalid {
                op: OP,
                detail: format!(
                    "instance {} was made by {}, not by this store's daemon {}",
                    stray.name, stray.maker, self.daemon
                ),
            });
        }
        let mut rows = Vec::with_capacity(instances.len());
        for instance in instances {
            let features: Vec<&str> = instance.features.iter().map(|f| f.name()).collect();
            rows.push((
                instance,
                serde_json::to_string(&features).expect("a list of strings always serializes"),
                self.seal_credentials(OP, instance)?,
            ));
        }

        // Written for a provision or a change the owner asked for: both count as use.
        let used_at_ms = now_ms();
        let mut tx = self.pool.begin().await.map_err(StoreError::db(OP))?;
        sqlx::query("DELETE FROM sandbox_instances WHERE owner = $1")
            .bind(owner.as_str())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let insert = format!(
            "INSERT INTO sandbox_instances ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        );
        for (instance, features, sealed) in rows {
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(instance.name.as_str())
                .bind(owner.as_str())
                .bind(instance.engine.name)
                .bind(instance.backend.as_str())
                .bind(instance.backend_id.as_str())
                .bind(instance.host.as_str())
                .bind(i64::from(instance.port))
                .bind(instance.database.as_str())
                .bind(instance.agent.user.as_str())
                .bind(features)
                .bind(instance.created_at_ms)
                .bind(sealed)
                .bind(used_at_ms)
                .bind(instance.clone.as_ref().map(|origin| {
                    serde_json::to_string(origin).expect("a clone origin always serializes")
                }))
                .bind(
                    instance
                        .size
                        .map(|size| i64::try_from(size.mb()).unwrap_or(i64::MAX)),
                )
                .execute(&mut *tx)
                .await
                .map_err(|e| match violation(&e) {
                    Violation::Unique => StoreError::Conflict {
                        op: OP,
                        what: "sandbox instance",
                        id: instance.name.clone(),
                    },
                    _ => StoreError::db(OP)(e),
                })?;
        }
        tx.commit().await.map_err(StoreError::db(OP))?;
        Ok(())
    }

    /// The stored rows of `owner`'s instances (of every owner's, if none is given), by owner
    /// and name.
    async fn instance_rows(
        &self,
        op: &'static str,
        owner: Option<&AgentSlug>,
    ) -> Result<Vec<AnyRow>> {
        let sql = match owner {
            Some(_) => {
                format!("SELECT {COLUMNS} FROM sandbox_instances WHERE owner = $1 ORDER BY name")
            }
            None => format!("SELECT {COLUMNS} FROM sandbox_instances ORDER BY owner, name"),
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(owner) = owner {
            query = query.bind(owner.as_str());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(op))
    }

    /// `owner`'s stored instances with their credentials, by name.
    pub async fn instances_of(&self, owner: &AgentSlug) -> Result<Vec<Instance>> {
        const OP: &str = "instances_of";
        self.instance_rows(OP, Some(owner))
            .await?
            .iter()
            .map(|row| self.instance_from_row(OP, row))
            .collect()
    }

    /// Every stored instance with its credentials (for reconciling at startup), by owner and
    /// name. One row that does not open fails the whole call: with a wrong key, all would.
    pub async fn all_instances(&self) -> Result<Vec<Instance>> {
        const OP: &str = "all_instances";
        self.instance_rows(OP, None)
            .await?
            .iter()
            .map(|row| self.instance_from_row(OP, row))
            .collect()
    }

    /// Every stored instance without credentials (for the panel, the janitor, and for cleaning
    /// up when credentials cannot be opened), by owner and name.
    pub async fn instance_summaries(&self) -> Result<Vec<InstanceSummary>> {
        const OP: &str = "instance_summaries";
        self.instance_rows(OP, None)
            .await?
            .iter()
            .map(|row| summary_from_row(OP, row))
            .collect()
    }

    /// Forgets `owner`'s instances; answers how many rows went.
    pub async fn delete_instances_of(&self, owner: &AgentSlug) -> Result<u64> {
        let result = sqlx::query("DELETE FROM sandbox_instances WHERE owner = $1")
            .bind(owner.as_str())
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("delete_instances_of"))?;
        Ok(result.rows_affected())
    }

    /// How many instances are stored.
    pub async fn count_instances(&self) -> Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM sandbox_instances")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("count_instances"))
    }

    /// Records that `owner` just got its sandbox again (a cache hit): restarts the idle clock.
    pub async fn touch_instances_of(&self, owner: &AgentSlug) -> Result<()> {
        sqlx::query("UPDATE sandbox_instances SET last_used_at_ms = $1 WHERE owner = $2")
            .bind(now_ms())
            .bind(owner.as_str())
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("touch_instances_of"))?;
        Ok(())
    }

    /// When one instance was last used; `None` when it is not stored.
    pub async fn last_used_of(&self, name: &str) -> Result<Option<i64>> {
        sqlx::query_scalar("SELECT last_used_at_ms FROM sandbox_instances WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("last_used_of"))
    }

    /// Forgets one instance; `false` when there was none.
    pub async fn delete_instance(&self, name: &str) -> Result<bool> {
        let result = sqlx::query("DELETE FROM sandbox_instances WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("delete_instance"))?;
        Ok(result.rows_affected() > 0)
    }
}
