-- When the owner last got its sandbox (provisioned or answered from the cache): the clock of the
-- janitor's idle TTL. Rows written before this column existed start idle from their creation.
ALTER TABLE sandbox_instances ADD COLUMN last_used_at_ms BIGINT NOT NULL DEFAULT 0;
UPDATE sandbox_instances SET last_used_at_ms = created_at_ms;
