-- What a snapshot holds and left out (JSON: counts, the names of what a clone lacks and why),
-- computed when it is stored so a listing needs not open the sealed body. No data value is in
-- it. NULL: stored before summaries were kept.
ALTER TABLE clone_snapshots ADD COLUMN summary TEXT;
