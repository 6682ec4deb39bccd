-- The broker's state: everything needed to go on after kill -9 from the last aggregated round.

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,                 -- the JobSpec as JSON (files replaced by their sha256)
    state TEXT NOT NULL,                -- running, finished, cancelled, failed
    round INTEGER NOT NULL,             -- the round being trained (= rounds aggregated so far)
    weights_hash TEXT NOT NULL,         -- canonical hash of W_round
    weights_blob TEXT NOT NULL,         -- sha256 of the blob holding W_round
    outer_state_blob TEXT,              -- Nesterov momentum, as a blob (NULL for FedAvg)
    failure TEXT,
    created_at INTEGER NOT NULL         -- ms since the epoch
);

-- One row per aggregated round: what a job owner sees of the training.
CREATE TABLE rounds (
    job TEXT NOT NULL REFERENCES jobs(id),
    round INTEGER NOT NULL,
    test_loss REAL NOT NULL,
    test_accuracy REAL NOT NULL,
    train_loss REAL NOT NULL,
    weights_hash TEXT NOT NULL,
    weights_blob TEXT NOT NULL,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (job, round)
);

-- The accepted result of each shard of the current round; a round aggregates when all are in.
CREATE TABLE shard_results (
    job TEXT NOT NULL REFERENCES jobs(id),
    round INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    node TEXT NOT NULL,
    result TEXT NOT NULL,               -- the ShardResult as JSON
    PRIMARY KEY (job, round, shard)
);

-- Shards handed to nodes. Re-issuing a straggler's shard adds an assignment; the first valid
-- result wins and later ones are answered "stale".
CREATE TABLE assignments (
    id TEXT PRIMARY KEY,
    job TEXT NOT NULL REFERENCES jobs(id),
    round INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    node TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    state TEXT NOT NULL                 -- active, answered, failed, expired
);
CREATE INDEX assignments_by_shard ON assignments (job, round, shard, state);

CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    info TEXT NOT NULL,                 -- the NodeInfo as JSON
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    shards_done INTEGER NOT NULL DEFAULT 0,
    shards_failed INTEGER NOT NULL DEFAULT 0
);
