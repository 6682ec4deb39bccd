-- training.evaluateEvery (docs/JOBS.md): the broker evaluates only some rounds. evaluated = 0: a
-- round it did not evaluate (test_loss and test_accuracy are 0 then, and the round is not in the
-- job's history); every round of before was evaluated.
ALTER TABLE rounds ADD COLUMN evaluated INTEGER NOT NULL DEFAULT 1 CHECK (evaluated IN (0, 1));
