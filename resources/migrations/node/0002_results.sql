-- Every shard result this node produced and what became of it, for the owner (tessera-node results,
-- and the app's Verification tab): computed -> committed -> accepted and paid, or failed, stale,
-- refused.
CREATE TABLE results (
    assignment TEXT PRIMARY KEY,
    broker TEXT NOT NULL,
    job TEXT NOT NULL,
    round INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    state TEXT NOT NULL,
    final_hash TEXT NOT NULL DEFAULT '',
    paid TEXT NOT NULL DEFAULT '0',     -- credits, as a decimal string
    detail TEXT NOT NULL DEFAULT '',    -- why it failed or was refused
    history TEXT NOT NULL DEFAULT '[]', -- [{"state": ..., "at": ms}, ...]
    updated_at INTEGER NOT NULL
);
CREATE INDEX results_by_time ON results (updated_at);
