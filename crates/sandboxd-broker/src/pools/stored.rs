//! Pools an operator sized or added (`sandboxd pools set`, `PUT /v1/pools/{pool}`, the panel):
//! stored as the setting `pool_size.<pool>` = `min_idle,max_total`, applied at once, and again
//! at every start. There the stored sizes win over the config file's for a pool the file also
//! has (which keeps the file's features), and a pool only stored is created (no features).

use std::sync::Arc;
use std::time::Instant;

use sandboxd_domain::{Actor, InputError};

use super::key::{parse_sizes, size_setting};
use super::{PoolKey, PoolView};
use crate::Broker;
use crate::audit::{AuditAction, AuditRecord, Outcome};
use crate::error::BrokerError;

/// The settings keys of stored pools begin so.
const PREFIX: &str = "pool_size.";

impl Broker {
    /// Applies every stored pool: sizes for the configured ones, the others created.
    pub(crate) async fn apply_stored_pool_sizes(&self) {
        let stored = match self.store().list_settings().await {
            Ok(stored) => stored,
            Err(err) => {
                tracing::warn!(error = %err, "reading the stored warm pools");
                return;
            }
        };
        for (setting, value) in stored {
            let Some(name) = setting.strip_prefix(PREFIX) else {
                continue;
            };
            let applied = match (PoolKey::parse(name), parse_sizes(&value)) {
                (Ok(key), Some((min_idle, max_total))) => {
                    self.inner.pools.set(&key, min_idle, max_total).map(|created| {
                        if created {
                            tracing::info!(pool = %key, min_idle, max_total, "a stored warm pool (not in the config file)");
                        }
                    })
                }
                (Err(err), _) => Err(err),
                (_, None) => Err("not `min_idle,max_total`".to_owned()),
            };
            if let Err(err) = applied {
                tracing::warn!(setting, value, error = %err, "ignoring a stored warm pool");
            }
        }
    }

    /// New sizes for a warm pool, or a new pool (no features) when none of `key` is there:
    /// stored (they outlive a restart and win over the config file's) and applied at once, the
    /// pool starting or removing members to match. A new pool must be of an engine the
    /// provisioning backend runs, and a pool of clones of a registered source.
    pub async fn resize_pool(
        &self,
        key: &PoolKey,
        min_idle: usize,
        max_total: usize,
    ) -> Result<PoolView, BrokerError> {
        let started = Instant::now();
        let exists = self.pools().iter().any(|v| v.key == *key);
        if !exists {
            self.check_new_pool(key).await?;
        }
        let invalid = |detail| {
            BrokerError::Input(InputError::Malformed {
                what: "pool sizes",
                detail,
            })
        };
        // Checked before anything is stored: refused sizes change nothing.
        let candidate = super::PoolConfig {
            engine: key.engine,
            clone_of: key.clone_of.clone(),
            features: Default::default(),
            min_idle,
            max_total,
        };
        candidate.validate().map_err(invalid)?;
        self.store()
            .set_setting(&size_setting(key), &format!("{min_idle},{max_total}"))
            .await?;
        let created = self
            .inner
            .pools
            .set(key, min_idle, max_total)
            .map_err(invalid)?;
        if created && let Some(source) = &key.clone_of {
            // A new pool of clones starts from the source's latest snapshot, as at start.
            match self.store().latest_snapshot(source).await {
                Ok(snapshot) => self
                    .inner
                    .pools
                    .offer_snapshot(source, snapshot.map(Arc::new)),
                Err(err) => {
                    tracing::warn!(%source, error = %err, "reading a snapshot for a new pool of clones");
                }
            }
        }
        let subject = key.to_string();
        self.audit(AuditRecord {
            actor: Actor::Operator,
            action: AuditAction::SetSetting,
            subject: &subject,
            project: None,
            outcome: Outcome::Ok,
            started,
            detail: format!(
                "warm pool{}: min_idle {min_idle}, max_total {max_total}",
                if created { " created" } else { "" }
            ),
        })
        .await;
        Ok(self
            .pools()
            .into_iter()
            .find(|v| v.key == *key)
            .expect("the pool just set exists"))
    }

    /// Refuses a new pool the daemon could never fill: an engine the provisioning backend
    /// does not run, or clones of a source that is not registered.
    async fn check_new_pool(&self, key: &PoolKey) -> Result<(), BrokerError> {
        let primary = self.inner.backends.primary();
        if let Err(err) = primary.supports(key.engine).await {
            return Err(BrokerError::Input(InputError::Malformed {
                what: "pool",
                detail: format!(
                    "the {} backend (which fills warm pools) cannot run {}: {err}",
                    primary.kind(),
                    key.engine.name
                ),
            }));
        }
        if let Some(source) = &key.clone_of
            && self.store().get_source(source).await?.is_none()
        {
            return Err(BrokerError::NotFound {
                what: "source",
                id: format!(
                    "{source} (register it first: `sandboxd sources add {source} --dsn -`)"
                ),
            });
        }
        Ok(())
    }
}
