-- A referee that agrees with neither side of a dispute over a job owner's code slashes nobody and
-- blames the job (docs/VERIFICATION.md, "What a job's code cannot do"): a check's outcome may now
-- be 'job'. SQLite cannot change a CHECK constraint in place, so the table is made anew.
CREATE TABLE checks_new (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('sample', 'canary')),
    job TEXT NOT NULL REFERENCES jobs(id),
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
    outcome TEXT NOT NULL DEFAULT '' CHECK (outcome IN ('', 'none', 'accused', 'verifier', 'both', 'job')), -- who lost
    detail TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    decided_at INTEGER,
    narrowing TEXT,                     -- a portable job's dispute: its stage, traces and instruction, as JSON
    CHECK ((kind = 'canary') = (accused IS NULL))
);
INSERT INTO checks_new SELECT id, kind, job, round, shard, start_hash, start_blob, accused, accused_assignment, accused_result,
    verifier, verifier_assignment, verifier_result, state, checkpoint, deadline, asked, outcome, detail, created_at,
    decided_at, narrowing FROM checks;
DROP TABLE checks;
ALTER TABLE checks_new RENAME TO checks;
CREATE INDEX checks_by_state ON checks (state);
CREATE INDEX checks_by_job ON checks (job, created_at);

-- The L2 norm of each result's change to the model, which a round compares with its other results
-- before it aggregates an unchecked one (docs/VERIFICATION.md, "Unchecked results"); NULL: not measured.
ALTER TABLE shard_results ADD COLUMN update_norm REAL;

-- Blobs a peer uploaded (PUT) that no job may name yet: bounded per uploader and collected when
-- they stay unnamed (docs/BROKER.md, "Uploads"). A row goes once its blob is named or gone.
CREATE TABLE uploads (
    blob TEXT NOT NULL,        -- sha256, hex
    uploader TEXT NOT NULL,    -- the account that uploaded it
    size INTEGER NOT NULL,     -- bytes
    at INTEGER NOT NULL,       -- ms since the epoch
    PRIMARY KEY (blob, uploader)
) WITHOUT ROWID;
CREATE INDEX uploads_by_uploader ON uploads (uploader);
