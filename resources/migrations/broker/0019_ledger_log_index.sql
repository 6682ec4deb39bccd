-- Each transfer's leaf in the ledger's log (docs/LEDGER.md, "Receipts"), so a receipt carries its
-- inclusion proof. Transfers logged before this column existed find theirs at the broker's start.
ALTER TABLE ledger_transfers ADD COLUMN log_idx INTEGER;
-- What the start looks for (transfers not yet linked to their leaf): none, at every start but one.
CREATE INDEX ledger_transfers_unlogged ON ledger_transfers (id) WHERE log_idx IS NULL;
