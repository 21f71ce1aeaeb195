-- A project's data space per engine (`sandboxd projects set … --size postgres=2G`), as JSON
-- engine -> MiB; NULL: every engine gets its backend's default.
ALTER TABLE projects ADD COLUMN sandbox_sizes TEXT;

-- The data space an instance was made with, in MiB; NULL for a server that keeps its data in
-- memory, or a row stored before sizes were (read as its backend's default).
ALTER TABLE sandbox_instances ADD COLUMN size_mb BIGINT;
