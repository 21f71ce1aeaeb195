-- MCP session state (the client's initialize parameters), so an agent's MCP session keeps
-- working across a daemon restart. No credential lives here: every request still carries and
-- checks its bearer token.
CREATE TABLE mcp_sessions (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
