-- Verification: a sampled result is re-executed by another node (or a canary re-checks a shard
-- whose answer is known); when the two disagree, the broker referees the one checkpoint interval
-- where their chains part. docs/VERIFICATION.md.

-- accepted: not sampled, paid; sampled: waits for its check, unpaid; verified: checked and paid.
ALTER TABLE shard_results ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted';
ALTER TABLE shard_results ADD COLUMN assignment TEXT;

-- train: a shard of a round; verify: the re-execution of a sampled result; canary: a known answer.
ALTER TABLE assignments ADD COLUMN kind TEXT NOT NULL DEFAULT 'train';
ALTER TABLE assignments ADD COLUMN verification TEXT;

-- The node's record, which sets its sampling rate (streak) and ranks it in the scheduler.
ALTER TABLE nodes ADD COLUMN streak INTEGER NOT NULL DEFAULT 0;        -- accepted since its last loss
ALTER TABLE nodes ADD COLUMN verified INTEGER NOT NULL DEFAULT 0;      -- results a re-execution confirmed
ALTER TABLE nodes ADD COLUMN disputes_lost INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN timeouts INTEGER NOT NULL DEFAULT 0;      -- checkpoints not delivered in a dispute
ALTER TABLE nodes ADD COLUMN slashed INTEGER NOT NULL DEFAULT 0;       -- micro-credits of stake lost

CREATE TABLE verifications (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,                 -- sample, canary
    job TEXT NOT NULL REFERENCES jobs(id),
    round INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    start_hash TEXT NOT NULL,           -- the round's weights: with the job's spec they give the task
    start_blob TEXT NOT NULL,
    accused TEXT,                       -- whose result is checked; NULL for a canary (a known answer)
    accused_assignment TEXT,
    accused_result TEXT NOT NULL,       -- the ShardResult as JSON (the known answer, for a canary)
    verifier TEXT,                      -- who re-executes; NULL while waiting
    verifier_assignment TEXT,
    verifier_result TEXT,
    state TEXT NOT NULL,                -- waiting, running, disputed, verified, rejected, closed, cancelled
    checkpoint INTEGER,                 -- in a dispute: the first checkpoint where the chains differ
    deadline INTEGER,                   -- in a dispute: for the checkpoint state
    asked TEXT NOT NULL DEFAULT '[]',   -- in a dispute: the nodes asked for the state, as JSON
    outcome TEXT NOT NULL DEFAULT '',   -- none, accused, verifier, both: who lost
    detail TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    decided_at INTEGER
);
CREATE INDEX verifications_by_state ON verifications (state);
CREATE INDEX verifications_by_job ON verifications (job, created_at);

-- Stake being unbonded: it stays slashable in `unbonding:<node>` until release_at.
CREATE TABLE unbonding (
    id INTEGER PRIMARY KEY,
    node TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount > 0),
    release_at INTEGER NOT NULL,
    released INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX unbonding_due ON unbonding (released, release_at);
