-- The first schema of sandboxd's store. Portable between SQLite and PostgreSQL: only TEXT and
-- BIGINT columns (booleans are 0/1, JSON is TEXT, times are Unix milliseconds), no
-- database-specific types, defaults or functions.

-- Persisted feature flags and other operator settings (§2).
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

-- Named counters, bumped with UPDATE … RETURNING inside the transaction that uses them.
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('task', 0);

CREATE TABLE projects (
    slug TEXT PRIMARY KEY,
    -- JSON list of engine names; NULL = not opted in.
    sandbox_services TEXT,
    -- JSON map engine -> [feature]; NULL = no standing extensions.
    sandbox_extensions TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE agents (
    slug TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    project TEXT NOT NULL REFERENCES projects (slug),
    -- Lowercase hex SHA-256 of the bearer token; the token itself is never stored.
    token_hash TEXT NOT NULL UNIQUE,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX agents_project ON agents (project);

CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    -- Creation order, from the 'task' counter; the id is 't-<seq>'.
    seq BIGINT NOT NULL UNIQUE,
    project TEXT NOT NULL REFERENCES projects (slug),
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('open', 'in_progress', 'review', 'in_review', 'done')),
    -- At most one holder per task: claim-locking is a compare-and-set on this column.
    claimed_by TEXT REFERENCES agents (slug),
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX tasks_project_state ON tasks (project, state, seq);
CREATE INDEX tasks_claimed_by ON tasks (claimed_by);

CREATE TABLE task_notes (
    -- Time-ordered id.
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    -- Not a foreign key: a note outlives the agent that wrote it.
    agent TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('note', 'evidence')),
    private BIGINT NOT NULL CHECK (private IN (0, 1)),
    body TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX task_notes_task ON task_notes (task_id, id);

-- One row per live service instance, so a restart does not forget live sandboxes (§4.4).
-- The owner is not a foreign key: a sandbox can exist before its agent does, and the janitor
-- reaps the ones whose owner is gone.
CREATE TABLE sandbox_instances (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    engine TEXT NOT NULL,
    backend TEXT NOT NULL,
    backend_id TEXT NOT NULL,
    host TEXT NOT NULL,
    port BIGINT NOT NULL,
    database_name TEXT NOT NULL,
    agent_user TEXT NOT NULL,
    -- JSON list of feature names.
    features TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    -- XChaCha20-Poly1305 over a JSON blob of the agent password and the superuser access,
    -- bound to this row's name; never plaintext.
    sealed_credentials TEXT NOT NULL
);
CREATE INDEX sandbox_instances_owner ON sandbox_instances (owner);

-- Every verb call and every provision / teardown / janitor action. Never a credential.
CREATE TABLE audit (
    -- Time-ordered id; paging walks it newest first.
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    -- 'agent:<slug>', 'operator' or 'daemon'.
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT NOT NULL,
    project TEXT,
    -- 'ok' or an error code.
    outcome TEXT NOT NULL,
    duration_ms BIGINT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_project ON audit (project, id);
CREATE INDEX audit_outcome ON audit (outcome, id);
