-- States the schema admits: each state and kind column takes exactly the names of its enum in
-- core/broker/states.h (tst_brokerstore checks that the two agree), and `verifications` is called
-- what the code calls it, `checks`. SQLite adds a CHECK constraint only by building the table
-- anew: the new tables are made beside the old ones (children referring to the new parents),
-- filled, the old ones dropped children first, and the new ones renamed, which also renames the
-- references to them. Runs in the migration's transaction: all of it or none.

CREATE TABLE jobs_new (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,                 -- the JobSpec as JSON (files replaced by their sha256)
    state TEXT NOT NULL CHECK (state IN ('running', 'finished', 'cancelled', 'failed')),
    round INTEGER NOT NULL CHECK (round >= 0), -- the round being trained (= rounds aggregated so far)
    weights_hash TEXT NOT NULL,         -- canonical hash of W_round
    weights_blob TEXT NOT NULL,         -- sha256 of the blob holding W_round
    outer_state_blob TEXT,              -- Nesterov momentum, as a blob (NULL for FedAvg)
    failure TEXT,
    created_at INTEGER NOT NULL,        -- ms since the epoch
    owner TEXT NOT NULL DEFAULT 'local',
    price_per_shard INTEGER NOT NULL DEFAULT 0 CHECK (price_per_shard >= 0)
);
INSERT INTO jobs_new (id, spec, state, round, weights_hash, weights_blob, outer_state_blob, failure, created_at, owner,
                      price_per_shard)
    SELECT id, spec, state, round, weights_hash, weights_blob, outer_state_blob, failure, created_at, owner, price_per_shard
    FROM jobs;

CREATE TABLE rounds_new (
    job TEXT NOT NULL REFERENCES jobs_new(id),
    round INTEGER NOT NULL CHECK (round >= 0),
    test_loss REAL NOT NULL,
    test_accuracy REAL NOT NULL,
    train_loss REAL NOT NULL,
    weights_hash TEXT NOT NULL,
    weights_blob TEXT NOT NULL,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (job, round)
);
INSERT INTO rounds_new SELECT job, round, test_loss, test_accuracy, train_loss, weights_hash, weights_blob, finished_at
    FROM rounds;

-- accepted: not sampled, paid; sampled: waits for its check, unpaid; verified: checked and paid.
CREATE TABLE shard_results_new (
    job TEXT NOT NULL REFERENCES jobs_new(id),
    round INTEGER NOT NULL CHECK (round >= 0),
    shard INTEGER NOT NULL CHECK (shard >= 0),
    node TEXT NOT NULL,
    result TEXT NOT NULL,               -- the ShardResult as JSON
    state TEXT NOT NULL DEFAULT 'accepted' CHECK (state IN ('accepted', 'sampled', 'verified')),
    assignment TEXT,
    PRIMARY KEY (job, round, shard)
);
INSERT INTO shard_results_new SELECT job, round, shard, node, result, state, assignment FROM shard_results;

-- train: a shard of a round; verify: the re-execution of a sampled result; canary: a known answer.
CREATE TABLE assignments_new (
    id TEXT PRIMARY KEY,
    job TEXT NOT NULL REFERENCES jobs_new(id),
    round INTEGER NOT NULL CHECK (round >= 0),
    shard INTEGER NOT NULL CHECK (shard >= 0),
    node TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('active', 'answered', 'failed', 'returned', 'expired')),
    kind TEXT NOT NULL DEFAULT 'train' CHECK (kind IN ('train', 'verify', 'canary')),
    verification TEXT,                  -- the check a verify or canary assignment re-executes
    CHECK ((kind = 'train') = (verification IS NULL))
);
INSERT INTO assignments_new SELECT id, job, round, shard, node, issued_at, deadline, state, kind, verification
    FROM assignments;

CREATE TABLE commitments_new (
    assignment TEXT PRIMARY KEY REFERENCES assignments_new(id),
    node TEXT NOT NULL,
    final_hash TEXT NOT NULL,
    chain_root TEXT NOT NULL,
    document TEXT NOT NULL,             -- the signed commitment as the node sent it
    at INTEGER NOT NULL
);
INSERT INTO commitments_new SELECT assignment, node, final_hash, chain_root, document, at FROM commitments;

CREATE TABLE checks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('sample', 'canary')),
    job TEXT NOT NULL REFERENCES jobs_new(id),
    round INTEGER NOT NULL CHECK (round >= 0),
    shard INTEGER NOT NULL CHECK (shard >= 0),
    start_hash TEXT NOT NULL,           -- the round's weights: with the job's spec they give the task
    start_blob TEXT NOT NULL,
    accused TEXT,                       -- whose result is checked; NULL for a canary (a known answer)
    accused_assignment TEXT,
    accused_result TEXT NOT NULL,       -- the ShardResult as JSON (the known answer, for a canary)
    verifier TEXT,                      -- who re-executes; NULL while waiting
    verifier_assignment TEXT,
    verifier_result TEXT,
    state TEXT NOT NULL
        CHECK (state IN ('waiting', 'running', 'disputed', 'verified', 'rejected', 'closed', 'cancelled')),
    checkpoint INTEGER,                 -- in a dispute: the first checkpoint where the chains differ
    deadline INTEGER,                   -- in a dispute: for the checkpoint state
    asked TEXT NOT NULL DEFAULT '[]',   -- in a dispute: the nodes asked for the state, as JSON
    outcome TEXT NOT NULL DEFAULT '' CHECK (outcome IN ('', 'none', 'accused', 'verifier', 'both')), -- who lost
    detail TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    decided_at INTEGER,
    CHECK ((kind = 'canary') = (accused IS NULL))
);
INSERT INTO checks SELECT id, kind, job, round, shard, start_hash, start_blob, accused, accused_assignment, accused_result,
    verifier, verifier_assignment, verifier_result, state, checkpoint, deadline, asked, outcome, detail, created_at,
    decided_at FROM verifications;

DROP TABLE verifications;
DROP TABLE commitments;
DROP TABLE rounds;
DROP TABLE shard_results;
DROP TABLE assignments;
DROP TABLE jobs;

ALTER TABLE jobs_new RENAME TO jobs;
ALTER TABLE rounds_new RENAME TO rounds;
ALTER TABLE shard_results_new RENAME TO shard_results;
ALTER TABLE assignments_new RENAME TO assignments;
ALTER TABLE commitments_new RENAME TO commitments;

CREATE INDEX assignments_by_shard ON assignments (job, round, shard, state);
CREATE INDEX checks_by_state ON checks (state);
CREATE INDEX checks_by_job ON checks (job, created_at);
