-- Several daemon replicas on one (PostgreSQL) store. A lease is a name one holder keeps until it
-- expires, so a crashed holder's lease frees itself: `agent:<slug>` serializes one agent's calls
-- across replicas, `leader:<task>` lets one replica at a time run a fleet-wide task (the
-- janitor, the snapshot refresher).
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

-- Every replica of this store and when it last said it was alive.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    seen_at_ms BIGINT NOT NULL
);

-- Warm-pool members by instance name, and the replica whose pools hold them: the janitor
-- (whichever replica leads it) leaves a live replica's members alone.
CREATE TABLE pool_members (
    name TEXT PRIMARY KEY,
    replica TEXT NOT NULL,
    registered_at_ms BIGINT NOT NULL
);
