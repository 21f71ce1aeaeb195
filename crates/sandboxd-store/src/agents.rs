//! Agents: a unique slug, a role name, a project, and the SHA-256 of the bearer token issued at
//! spawn. The token itself is never stored; a request is authenticated by hashing its token and
//! looking the hash up ([`Store::agent_by_token_hash`]).

use sandboxd_domain::Agent;
use sandboxd_domain::clock::now_ms;
use sandboxd_domain::{AgentSlug, ProjectSlug};
use secrecy::SecretString;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::error::{Result, StoreError, Violation, violation};

/// The stored form of a bearer token: lowercase hex of its SHA-256.
pub fn token_hash(token: &SecretString) -> String {
    sandboxd_domain::credentials::sha256_hex(token)
}

/// What [`Store::create_agent`] needs.
#[derive(Debug, Clone)]
pub struct NewAgent<'a> {
    pub slug: &'a AgentSlug,
    pub role: &'a str,
    pub project: &'a ProjectSlug,
    pub token_hash: &'a str,
}

const COLUMNS: &str = "slug, role, project, token_hash, created_at_ms";

fn agent_from_row(op: &'static str, row: &AnyRow) -> Result<Agent> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let slug: String = row.try_get("slug").map_err(get)?;
    let slug = AgentSlug::parse(&slug).map_err(|e| StoreError::corrupt(op, "agent slug", e))?;
    let project: String = row.try_get("project").map_err(get)?;
    let project = ProjectSlug::parse(&project)
        .map_err(|e| StoreError::corrupt(op, format!("project of agent {slug}"), e))?;
    Ok(Agent {
        role: row.try_get("role").map_err(get)?,
        project,
        token_hash: row.try_get("token_hash").map_err(get)?,
        created_at_ms: row.try_get("created_at_ms").map_err(get)?,
        slug,
    })
}

fn is_token_hash(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Store {
    /// Creates an agent. [`StoreError::Conflict`] when the slug (or, astronomically unlikely,
    /// the token hash) exists; [`StoreError::NotFound`] when the project does not.
    pub async fn create_agent(&self, agent: &NewAgent<'_>) -> Result<Agent> {
        const OP: &str = "create_agent";
        if !is_token_hash(agent.token_hash) {
            return Err(StoreError::Invalid {
                op: OP,
                detail: "token_hash must be 64 lowercase hex characters (see token_hash())"
                    .to_owned(),
            });
        }
        if agent.slug.is_pool_slot() {
            return Err(StoreError::Invalid {
                op: OP,
                detail: format!(
                    "agent slug {} has the form pool-<8 hex digits>, reserved for warm-pool \
                     members; choose another slug",
                    agent.slug
                ),
            });
        }
        let sql = format!(
            "INSERT INTO agents ({COLUMNS}) VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent.slug.as_str())
            .bind(agent.role)
            .bind(agent.project.as_str())
            .bind(agent.token_hash)
            .bind(now_ms())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| match violation(&e) {
                Violation::Unique => StoreError::Conflict {
                    op: OP,
                    what: "agent",
                    id: agent.slug.to_string(),
                },
                Violation::ForeignKey => StoreError::NotFound {
                    op: OP,
                    what: "project",
                    id: agent.project.to_string(),
                },
                Violation::Other => StoreError::db(OP)(e),
            })?;
        agent_from_row(OP, &row)
    }

    pub async fn get_agent(&self, slug: &AgentSlug) -> Result<Option<Agent>> {
        const OP: &str = "get_agent";
        let sql = format!("SELECT {COLUMNS} FROM agents WHERE slug = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(slug.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| agent_from_row(OP, &row))
            .transpose()
    }

    /// The agent a bearer token belongs to, by the token's hash.
    pub async fn agent_by_token_hash(&self, token_hash: &str) -> Result<Option<Agent>> {
        const OP: &str = "agent_by_token_hash";
        let sql = format!("SELECT {COLUMNS} FROM agents WHERE token_hash = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| agent_from_row(OP, &row))
            .transpose()
    }

    /// Every agent (of one project, if given), by slug.
    pub async fn list_agents(&self, project: Option<&ProjectSlug>) -> Result<Vec<Agent>> {
        const OP: &str = "list_agents";
        let sql = match project {
            Some(_) => format!("SELECT {COLUMNS} FROM agents WHERE project = $1 ORDER BY slug"),
            None => format!("SELECT {COLUMNS} FROM agents ORDER BY slug"),
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(project) = project {
            query = query.bind(project.as_str());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(|row| agent_from_row(OP, row))
            .collect()
    }

    /// Deletes the agent; `false` when there was none. Refused ([`StoreError::InUse`]) while it
    /// still holds a task: the broker returns the task first (the lifecycle is its business).
    /// Its notes, audit rows and sandbox rows stay (the janitor reaps sandboxes of gone owners).
    pub async fn delete_agent(&self, slug: &AgentSlug) -> Result<bool> {
        const OP: &str = "delete_agent";
        let result = sqlx::query("DELETE FROM agents WHERE slug = $1")
            .bind(slug.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| match violation(&e) {
                Violation::ForeignKey => StoreError::InUse {
                    op: OP,
                    what: "agent",
                    id: slug.to_string(),
                    detail: "it still holds a task",
                },
                _ => StoreError::db(OP)(e),
            })?;
        Ok(result.rows_affected() > 0)
    }
}
