-- A client names its SUBMIT (docs/PROTOCOL.md, "Submitting twice"): a SUBMIT that repeats an
-- owner's request id gets the job the first one created, so a client that gave up waiting and
-- asks again never creates, nor pays for, a second job. NULL: the client named none.
ALTER TABLE jobs ADD COLUMN request_id TEXT;
CREATE UNIQUE INDEX jobs_by_request ON jobs (owner, request_id) WHERE request_id IS NOT NULL;

-- A round's weights leave the disk once they fall out of what the broker keeps (docs/BROKER.md,
-- "Disk": the last Broker/KeepRounds rounds, the final weights, the rounds the owner asked for).
-- The row stays, with the weights' hash, for the job's history; kept = 0: its blob was collected.
ALTER TABLE rounds ADD COLUMN kept INTEGER NOT NULL DEFAULT 1 CHECK (kept IN (0, 1));

-- Who checks whom (docs/VERIFICATION.md, "Who checks whom"): the verifiers of a node's latest
-- checked results, so that one node cannot check most of another's.
CREATE INDEX checks_by_accused ON checks (accused, created_at) WHERE accused IS NOT NULL;
