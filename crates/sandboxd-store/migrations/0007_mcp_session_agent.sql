-- Which agent opened each MCP session: a session answers only to the token of the agent that
-- opened it (any other reads as unknown), and an agent holds a bounded number of sessions.
-- Rows stored before this column existed belong to no one, so they read as unknown too and their
-- clients start new sessions.
ALTER TABLE mcp_sessions ADD COLUMN agent TEXT;
CREATE INDEX mcp_sessions_agent ON mcp_sessions (agent, last_used_at_ms);
