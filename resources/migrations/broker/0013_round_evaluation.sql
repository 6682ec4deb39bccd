-- A round's evaluation runs beside the next round (docs/BROKER.md, "Rounds"): the round is recorded
-- when its weights are aggregated (finished_at), and its test loss and accuracy when its evaluation
-- ends. evaluated = 0: not yet, or never (training.evaluateEvery skips it); test_loss and
-- test_accuracy are 0 then, and the round is not in the job's history. A restarted broker evaluates
-- the rounds it owes again while their weights are kept.
ALTER TABLE rounds ADD COLUMN evaluated INTEGER NOT NULL DEFAULT 1 CHECK (evaluated IN (0, 1));
