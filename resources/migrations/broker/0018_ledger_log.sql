-- The ledger's log (docs/LEDGER.md): every transfer as a leaf of a Merkle tree (RFC 6962),
-- appended in the transfer's transaction.
CREATE TABLE ledger_log (
    idx INTEGER PRIMARY KEY,    -- the leaf's position, from 0
    entry TEXT NOT NULL,        -- the leaf's bytes: compact JSON, keys sorted
    leaf_hash TEXT NOT NULL     -- hex SHA-256(0x00 || entry)
);
-- The perfect subtrees of 256, 65,536, ... leaves (levels 8, 16, ...), each written as it fills:
-- a proof reads at most 255 hashes of a level to make one of the levels between.
CREATE TABLE ledger_log_tiles (
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (level, idx)
);
