-- A dispute over a portable job is narrowed to one instruction (docs/VERIFICATION.md, "Disputes
-- over portable jobs"): its stage (traces, operands), the traces the two sides gave and the
-- instruction the referee runs, as JSON; NULL for every other dispute.
ALTER TABLE checks ADD COLUMN narrowing TEXT;
