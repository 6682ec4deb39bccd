-- A check of a pipeline job's stage (docs/VERIFICATION.md, "Pipeline stages"): the blob of what the
-- stage received, which its re-execution reads (ShardTask.stageInputs); NULL for every other check.
ALTER TABLE checks ADD COLUMN inputs TEXT;
