-- Each transfer's leaf in the ledger's log (docs/LEDGER.md, "Receipts"), so a receipt carries its
-- inclusion proof. Transfers logged before this column existed find theirs at the broker's start.
ALTER TABLE ledger_transfers ADD COLUMN log_idx INTEGER;
