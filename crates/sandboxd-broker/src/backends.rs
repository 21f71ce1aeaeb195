//! The backends a broker uses: one provisions new sandboxes; every available one is asked for
//! liveness, teardown and listing, so instances of a backend that is no longer the primary (the
//! configuration changed across a restart) are still found and reaped.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::join_all;
use sandboxd_backend::{Backend, ListedInstance};
use sandboxd_domain::BackendKind;

#[derive(Debug, Clone)]
pub struct Backends {
    primary: Arc<dyn Backend>,
    others: Vec<Arc<dyn Backend>>,
}

impl Backends {
    pub fn new(primary: Arc<dyn Backend>, others: Vec<Arc<dyn Backend>>) -> Self {
        let others = others
            .into_iter()
            .filter(|b| b.kind() != primary.kind())
            .collect();
        Self { primary, others }
    }

    pub fn primary(&self) -> &Arc<dyn Backend> {
        &self.primary
    }

    pub fn for_kind(&self, kind: BackendKind) -> Option<&Arc<dyn Backend>> {
        std::iter::once(&self.primary)
            .chain(&self.others)
            .find(|b| b.kind() == kind)
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Backend>> {
        std::iter::once(&self.primary).chain(&self.others)
    }

    /// Every instance every backend lists, asked in parallel. A backend that cannot list is
    /// logged and skipped: what the others list is still worth acting on.
    pub(crate) async fn list_all(&self) -> Vec<ListedInstance> {
        self.listing().await.instances
    }

    /// [`Self::list_all`], also naming the backends that could not list: their instances are
    /// unknown this time, not gone.
    pub(crate) async fn listing(&self) -> Listing {
        let listings = join_all(
            self.all()
                .map(|backend| async move { (backend.kind(), backend.list().await) }),
        )
        .await;
        let mut listing = Listing::default();
        for (kind, listed) in listings {
            match listed {
                Ok(instances) => listing.instances.extend(instances),
                Err(err) => {
                    tracing::warn!(backend = %kind, error = %err, "listing failed");
                    listing.unlisted.insert(kind);
                }
            }
        }
        listing
    }
}

/// What the backends listed, and which of them could not.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub instances: Vec<ListedInstance>,
    pub unlisted: BTreeSet<BackendKind>,
}
