//! Projects and their sandbox opt-in: `sandbox_services` (a JSON list of engine names, NULL when
//! not opted in), `sandbox_extensions` (a JSON map engine → features), `sandbox_clones` (a JSON
//! map engine → `source` or `source:privacy`; a daemon from before privacy per project refuses
//! the second form as corrupt rather than hand out values it was not meant to) and
//! `sandbox_sizes` (a JSON map engine → MiB). All are re-validated against the registry and the allowlists when read, so
//! a row edited by hand cannot smuggle an engine or a feature past the types.

use sandboxd_domain::Project;
use std::collections::BTreeMap;

use sandboxd_domain::clock::now_ms;
use sandboxd_domain::clone::CloneChoice;
use sandboxd_domain::{EngineRef, FeatureRequest, ProjectSizes, ProjectSlug};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Store;
use crate::error::{Result, StoreError, Violation, violation};

const COLUMNS: &str = "slug, sandbox_services, sandbox_extensions, sandbox_clones, sandbox_sizes, \
                       created_at_ms, updated_at_ms";

fn services_json(services: &[EngineRef]) -> String {
    let names: Vec<&str> = services.iter().map(|e| e.name).collect();
    serde_json::to_string(&names).expect("a list of strings always serializes")
}

fn extensions_json(extensions: &FeatureRequest) -> String {
    serde_json::to_string(&extensions.to_map()).expect("a map of string lists always serializes")
}

fn project_from_row(op: &'static str, row: &AnyRow) -> Result<Project> {
    let get = |e: sqlx::Error| StoreError::db(op)(e);
    let slug: String = row.try_get("slug").map_err(get)?;
    let slug = ProjectSlug::parse(&slug).map_err(|e| StoreError::corrupt(op, "project slug", e))?;
    let what = |column: &str| format!("{column} of project {slug}");

    let services: Option<String> = row.try_get("sandbox_services").map_err(get)?;
    let sandbox_services = services
        .map(|text| {
            let names: Vec<String> = serde_json::from_str(&text)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_services"), e))?;
            names
                .iter()
                .map(|name| EngineRef::parse(name))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::corrupt(op, what("sandbox_services"), e))
        })
        .transpose()?;

    let extensions: Option<String> = row.try_get("sandbox_extensions").map_err(get)?;
    let sandbox_extensions = extensions
        .map(|text| {
            let raw: BTreeMap<String, Vec<String>> = serde_json::from_str(&text)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_extensions"), e))?;
            FeatureRequest::parse_map(&raw)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_extensions"), e))
        })
        .transpose()?;

    let clones: Option<String> = row.try_get("sandbox_clones").map_err(get)?;
    let sandbox_clones = match clones {
        None => Vec::new(),
        Some(text) => {
            let raw: BTreeMap<String, String> = serde_json::from_str(&text)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_clones"), e))?;
            raw.iter()
                .map(|(engine, source)| {
                    Ok((
                        EngineRef::parse(engine)
                            .map_err(|e| StoreError::corrupt(op, what("sandbox_clones"), e))?,
                        CloneChoice::parse(source)
                            .map_err(|e| StoreError::corrupt(op, what("sandbox_clones"), e))?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?
        }
    };

    let sizes: Option<String> = row.try_get("sandbox_sizes").map_err(get)?;
    let sandbox_sizes = match sizes {
        None => ProjectSizes::default(),
        Some(text) => {
            let raw: BTreeMap<String, u64> = serde_json::from_str(&text)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_sizes"), e))?;
            ProjectSizes::from_mb(&raw)
                .map_err(|e| StoreError::corrupt(op, what("sandbox_sizes"), e))?
        }
    };

    Ok(Project {
        sandbox_services,
        sandbox_extensions,
        sandbox_clones,
        sandbox_sizes,
        created_at_ms: row.try_get("created_at_ms").map_err(get)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(get)?,
        slug,
    })
}

impl Store {
    /// Creates the project or replaces its sandbox settings (its creation time stays).
    pub async fn put_project(
        &self,
        slug: &ProjectSlug,
        sandbox_services: Option<&[EngineRef]>,
        sandbox_extensions: Option<&FeatureRequest>,
    ) -> Result<Project> {
        const OP: &str = "put_project";
        let now = now_ms();
        let row = sqlx::query(
            "INSERT INTO projects (slug, sandbox_services, sandbox_extensions, created_at_ms, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (slug) DO UPDATE SET sandbox_services = excluded.sandbox_services, \
             sandbox_extensions = excluded.sandbox_extensions, \
             updated_at_ms = excluded.updated_at_ms \
             RETURNING slug, sandbox_services, sandbox_extensions, sandbox_clones, sandbox_sizes, \
             created_at_ms, updated_at_ms",
        )
        .bind(slug.as_str())
        .bind(sandbox_services.map(services_json))
        .bind(sandbox_extensions.map(extensions_json))
        .bind(now)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db(OP))?;
        project_from_row(OP, &row)
    }

    /// Sets which of the project's engines are clones of which source, under which privacy
    /// mode (empty: none). [`StoreError::NotFound`] when there is no such project.
    pub async fn set_project_clones(
        &self,
        slug: &ProjectSlug,
        clones: &[(EngineRef, CloneChoice)],
    ) -> Result<Project> {
        const OP: &str = "set_project_clones";
        let json = (!clones.is_empty()).then(|| {
            let map: BTreeMap<&str, String> = clones
                .iter()
                .map(|(e, choice)| (e.name, choice.to_string()))
                .collect();
            serde_json::to_string(&map).expect("a map of strings always serializes")
        });
        self.set_project_json(OP, "sandbox_clones", slug, json)
            .await
    }

    /// Sets the project's data space per engine (empty: the backends' defaults).
    /// [`StoreError::NotFound`] when there is no such project.
    pub async fn set_project_sizes(
        &self,
        slug: &ProjectSlug,
        sizes: &ProjectSizes,
    ) -> Result<Project> {
        const OP: &str = "set_project_sizes";
        let json = (!sizes.is_empty()).then(|| {
            serde_json::to_string(&sizes.to_mb()).expect("a map of numbers always serializes")
        });
        self.set_project_json(OP, "sandbox_sizes", slug, json).await
    }

    /// Sets one of the project's JSON columns (`column` is one of ours, never input) and
    /// returns the project. [`StoreError::NotFound`] when there is no such project.
    async fn set_project_json(
        &self,
        op: &'static str,
        column: &'static str,
        slug: &ProjectSlug,
        json: Option<String>,
    ) -> Result<Project> {
        let sql = format!(
            "UPDATE projects SET {column} = $2, updated_at_ms = $3 WHERE slug = $1 \
             RETURNING {COLUMNS}"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(slug.as_str())
            .bind(json)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(op))?
            .map(|row| project_from_row(op, &row))
            .transpose()?
            .ok_or_else(|| StoreError::NotFound {
                op,
                what: "project",
                id: slug.to_string(),
            })
    }

    pub async fn get_project(&self, slug: &ProjectSlug) -> Result<Option<Project>> {
        const OP: &str = "get_project";
        let sql = format!("SELECT {COLUMNS} FROM projects WHERE slug = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(slug.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .map(|row| project_from_row(OP, &row))
            .transpose()
    }

    /// Every project, by slug.
    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        const OP: &str = "list_projects";
        let sql = format!("SELECT {COLUMNS} FROM projects ORDER BY slug");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(|row| project_from_row(OP, row))
            .collect()
    }

    /// Deletes the project; `false` when there was none. Refused ([`StoreError::InUse`]) while
    /// agents or tasks still belong to it.
    pub async fn delete_project(&self, slug: &ProjectSlug) -> Result<bool> {
        const OP: &str = "delete_project";
        let result = sqlx::query("DELETE FROM projects WHERE slug = $1")
            .bind(slug.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| match violation(&e) {
                Violation::ForeignKey => StoreError::InUse {
                    op: OP,
                    what: "project",
                    id: slug.to_string(),
                    detail: "agents or tasks still belong to it",
                },
                _ => StoreError::db(OP)(e),
            })?;
        Ok(result.rows_affected() > 0)
    }
}
