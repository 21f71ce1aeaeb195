//! The "productions" a clone's fidelity is measured against, shared by the backend's clone tests
//! and the bench (which cannot depend on test files): each data set's load, the queries whose
//! plans a clone must pick as production does, the misses known and why, and the comparison of
//! plan shapes.
//!
//! - [`shop`]: the data set the clones were built on (2.5M rows).
//! - [`wide`]: one written to break them: every kind of planner input a clone must carry.

pub mod shop;
pub mod wide;

use sandboxd_domain::clone::plan_shape;
use tokio_postgres::{Client, SimpleQueryMessage};

/// Run after a data set's `LOAD`, each statement on its own (`VACUUM` refuses a transaction
/// block).
pub const FINISH: &[&str] = &["VACUUM ANALYZE"];

/// Production's own server configuration (command-line flags of the image's `postgres`): the
/// planner settings a clone must carry over, then what only makes loading faster.
pub const PRODUCTION_FLAGS: &[&str] = &[
    "-c",
    "random_page_cost=1.1",
    "-c",
    "effective_cache_size=2GB",
    "-c",
    "fsync=off",
    "-c",
    "synchronous_commit=off",
    "-c",
    "full_page_writes=off",
    "-c",
    "max_wal_size=4GB",
    "-c",
    "maintenance_work_mem=256MB",
];

/// A query a copy is known to plan otherwise than production, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownMiss {
    /// Exactly as in the data set's `QUERIES`.
    pub query: &'static str,
    pub reason: &'static str,
}

/// One data set: what loads it, what it is measured by, and what a keep-values clone is known
/// to miss.
#[derive(Debug, Clone, Copy)]
pub struct DataSet {
    pub name: &'static str,
    pub load: &'static str,
    pub queries: &'static [&'static str],
    pub known_misses: &'static [KnownMiss],
}

/// The shop: every plan agrees (no known miss).
pub const SHOP: DataSet = DataSet {
    name: "shop",
    load: shop::LOAD,
    queries: shop::QUERIES,
    known_misses: &[],
};

/// The wide data set: its misses are the extended statistics a clone does not carry yet and
/// the height of its empty indexes.
pub const WIDE: DataSet = DataSet {
    name: "wide",
    load: wide::LOAD,
    queries: wide::QUERIES,
    known_misses: wide::KNOWN_MISSES,
};

/// `EXPLAIN (FORMAT JSON) query`'s document on the server `client` is connected to.
pub async fn explain(client: &Client, query: &str) -> Result<serde_json::Value, String> {
    let answers = client
        .simple_query(&format!("EXPLAIN (FORMAT JSON) {query}"))
        .await
        .map_err(|e| format!("EXPLAIN {query}: {e:?}"))?;
    let text = answers
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| format!("EXPLAIN {query} answered no row"))?;
    serde_json::from_str(&text).map_err(|e| format!("EXPLAIN {query}'s JSON: {e}"))
}

/// Each query's plan shape ([`explain`], then [`plan_shape`]) on the server `client` is
/// connected to.
pub async fn plan_shapes(client: &Client, queries: &[&str]) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(queries.len());
    for query in queries {
        let json = explain(client, query).await?;
        out.push(plan_shape(&json).ok_or_else(|| format!("EXPLAIN {query}: no plan"))?);
    }
    Ok(out)
}

/// A query whose plan on a copy is not production's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// Its position in the data set's queries, from 1.
    pub number: usize,
    pub query: &'static str,
    pub production: String,
    pub copy: String,
    /// The known miss's reason; None for one nobody explained.
    pub reason: Option<&'static str>,
}

/// Production's plan shapes against a copy's, query by query.
#[derive(Debug, Clone)]
pub struct Agreement {
    pub queries: usize,
    pub misses: Vec<Miss>,
}

impl Agreement {
    /// Compares `copy` with `production` (both in the order of `queries`); a miss on the list
    /// `known` carries its reason.
    pub fn compare(
        queries: &[&'static str],
        production: &[String],
        copy: &[String],
        known: &[KnownMiss],
    ) -> Self {
        assert_eq!(production.len(), queries.len(), "one plan per query");
        assert_eq!(copy.len(), queries.len(), "one plan per query");
        let misses = queries
            .iter()
            .zip(production.iter().zip(copy))
            .enumerate()
            .filter(|(_, (_, (p, c)))| p != c)
            .map(|(i, (query, (p, c)))| Miss {
                number: i + 1,
                query,
                production: p.clone(),
                copy: c.clone(),
                reason: known.iter().find(|k| k.query == *query).map(|k| k.reason),
            })
            .collect();
        Self {
            queries: queries.len(),
            misses,
        }
    }

    pub fn agreed(&self) -> usize {
        self.queries - self.misses.len()
    }

    /// The share of queries planned alike, 0 to 1.
    pub fn rate(&self) -> f64 {
        if self.queries == 0 {
            return 1.0;
        }
        self.agreed() as f64 / self.queries as f64
    }

    /// `agreed/queries (rate %)`.
    pub fn summary(&self) -> String {
        format!(
            "{}/{} ({:.1} %)",
            self.agreed(),
            self.queries,
            self.rate() * 100.0
        )
    }

    /// Misses no known miss explains.
    pub fn unexplained(&self) -> Vec<&Miss> {
        self.misses.iter().filter(|m| m.reason.is_none()).collect()
    }

    /// Known misses that did not happen: the list is stale (what it blamed is fixed).
    pub fn stale<'k>(&self, known: &'k [KnownMiss]) -> Vec<&'k KnownMiss> {
        known
            .iter()
            .filter(|k| !self.misses.iter().any(|m| m.query == k.query))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERIES: &[&str] = &["a", "b", "c"];

    fn shapes(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_miss_carries_its_known_reason_and_a_known_miss_that_agrees_is_stale() {
        let known = [
            KnownMiss {
                query: "b",
                reason: "why b",
            },
            KnownMiss {
                query: "c",
                reason: "why c",
            },
        ];
        let agreement = Agreement::compare(
            QUERIES,
            &shapes(&["Seq", "Index", "Seq"]),
            &shapes(&["Bitmap", "Seq", "Seq"]),
            &known,
        );
        assert_eq!(agreement.agreed(), 1);
        assert_eq!(agreement.summary(), "1/3 (33.3 %)");
        let numbers: Vec<usize> = agreement.misses.iter().map(|m| m.number).collect();
        assert_eq!(numbers, [1, 2]);
        assert_eq!(agreement.misses[1].reason, Some("why b"));
        let unexplained: Vec<&str> = agreement.unexplained().iter().map(|m| m.query).collect();
        assert_eq!(unexplained, ["a"]);
        let stale: Vec<&str> = agreement.stale(&known).iter().map(|k| k.query).collect();
        assert_eq!(stale, ["c"]);
    }

    #[test]
    fn every_known_miss_names_a_query_of_its_data_set() {
        for set in [SHOP, WIDE] {
            for known in set.known_misses {
                assert!(
                    set.queries.contains(&known.query),
                    "{}: {} is not one of its queries",
                    set.name,
                    known.query
                );
            }
        }
    }
}
