-- When an MCP session was last used: the clock of its time-to-live. A session idle past the TTL
-- is refused like an unknown one and swept, so sessions an agent opened and forgot do not pile
-- up. Rows written before this column existed start from their creation.
ALTER TABLE mcp_sessions ADD COLUMN last_used_at_ms BIGINT NOT NULL DEFAULT 0;
UPDATE mcp_sessions SET last_used_at_ms = created_at_ms;
CREATE INDEX mcp_sessions_last_used ON mcp_sessions (last_used_at_ms);
