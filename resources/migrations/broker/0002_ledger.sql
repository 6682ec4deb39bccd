-- The ledger: double entry in integer micro-credits. Every movement of money is one row of
-- `transfers`, from a debit account to a credit account, named by its cause (unique: a cause pays
-- once, however often it is retried). `accounts.balance` is a cache of the transfers, kept in the
-- same transaction; the account 'mint' is the only one that may go negative, and the sum of all
-- balances is always zero, so everything held anywhere equals what was minted.

CREATE TABLE ledger_accounts (
    name TEXT PRIMARY KEY,              -- mint, faucet, escrow:<job>, balance:<id>, stake:<node>, ...
    balance INTEGER NOT NULL DEFAULT 0,
    CHECK (balance >= 0 OR name = 'mint')
);

CREATE TABLE ledger_transfers (
    id INTEGER PRIMARY KEY,
    debit TEXT NOT NULL REFERENCES ledger_accounts(name),
    credit TEXT NOT NULL REFERENCES ledger_accounts(name),
    amount INTEGER NOT NULL CHECK (amount > 0),
    cause TEXT NOT NULL UNIQUE,
    memo TEXT NOT NULL DEFAULT '',
    at INTEGER NOT NULL,
    CHECK (debit <> credit)
);
CREATE INDEX ledger_transfers_by_debit ON ledger_transfers (debit);
CREATE INDEX ledger_transfers_by_credit ON ledger_transfers (credit);

INSERT INTO ledger_accounts (name, balance) VALUES ('mint', 0);
