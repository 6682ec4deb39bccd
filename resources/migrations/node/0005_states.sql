-- A result's state takes exactly the names of core::NodeResultState (core/resultstates.h;
-- tst_resultlog checks that the two agree). SQLite adds a CHECK constraint only by building the
-- table anew: the new one is made beside the old, filled, the old dropped and the new renamed, in
-- the migration's transaction. A state no version of Tessera wrote (a broker's word copied
-- verbatim by an old node) becomes `refused`, and its detail says what it was: nothing is dropped.
CREATE TABLE results_new (
    assignment TEXT PRIMARY KEY,
    broker TEXT NOT NULL,
    job TEXT NOT NULL,
    round INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('computed', 'failed', 'returned', 'committed', 'accepted', 'paid',
                                         'sampled', 'verified', 'disputed', 'slashed', 'rejected', 'stale',
                                         'refused')),
    final_hash TEXT NOT NULL DEFAULT '',
    paid TEXT NOT NULL DEFAULT '0',     -- credits, as a decimal string
    detail TEXT NOT NULL DEFAULT '',    -- why it failed or was refused
    history TEXT NOT NULL DEFAULT '[]', -- [{"state": ..., "at": ms}, ...]
    updated_at INTEGER NOT NULL,
    checkpoints TEXT NOT NULL DEFAULT '[]',
    task TEXT NOT NULL DEFAULT '',
    inputs TEXT NOT NULL DEFAULT '[]'
);
INSERT INTO results_new (assignment, broker, job, round, shard, state, final_hash, paid, detail, history, updated_at,
                         checkpoints, task, inputs)
    SELECT assignment, broker, job, round, shard,
           CASE WHEN state IN ('computed', 'failed', 'returned', 'committed', 'accepted', 'paid', 'sampled', 'verified',
                               'disputed', 'slashed', 'rejected', 'stale', 'refused') THEN state ELSE 'refused' END,
           final_hash, paid,
           CASE WHEN state IN ('computed', 'failed', 'returned', 'committed', 'accepted', 'paid', 'sampled', 'verified',
                               'disputed', 'slashed', 'rejected', 'stale', 'refused') THEN detail
                ELSE 'the broker said "' || state || '", which is no state of a result' ||
                     CASE WHEN detail = '' THEN '' ELSE ': ' || detail END END,
           history, updated_at, checkpoints, task, inputs
    FROM results;
DROP TABLE results;
ALTER TABLE results_new RENAME TO results;
CREATE INDEX results_by_time ON results (updated_at);
