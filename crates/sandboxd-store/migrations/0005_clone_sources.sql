-- Production Postgres servers that clones are made from (SPEC §7). The DSN is sealed with the
-- store key, bound to the source's name, and never returned to an agent or an operator.
CREATE TABLE clone_sources (
    name TEXT PRIMARY KEY,
    sealed_dsn TEXT NOT NULL,
    -- 'keep-values' or 'no-values'.
    privacy TEXT NOT NULL,
    -- Seconds between snapshots; 0: on demand only.
    refresh_secs BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    -- The last snapshot attempt and, when it failed, why (never the DSN).
    last_attempt_at_ms BIGINT,
    last_error TEXT
);

-- The latest snapshot of each source, what every clone of it is made from: schema, statistics
-- (sample values of production's data unless the source is 'no-values') and settings, as JSON
-- sealed like the DSN.
CREATE TABLE clone_snapshots (
    source TEXT PRIMARY KEY REFERENCES clone_sources (name) ON DELETE CASCADE,
    taken_at_ms BIGINT NOT NULL,
    server_version TEXT NOT NULL,
    took_ms BIGINT NOT NULL,
    sealed_body TEXT NOT NULL
);

-- Which of a project's engines are clones, as JSON engine -> source name; NULL: none.
ALTER TABLE projects ADD COLUMN sandbox_clones TEXT;

-- What a clone was made from (JSON: source, snapshot time and version, privacy, notes); NULL
-- for an ordinary instance.
ALTER TABLE sandbox_instances ADD COLUMN clone_origin TEXT;
