-- Commit, then reveal: before its weights, a node sends the hash of its final weights and the root
-- of its checkpoint chain, signed with its Ed25519 key. A result that does not match its
-- commitment is refused, and the signed commitment is evidence in a dispute.
CREATE TABLE commitments (
    assignment TEXT PRIMARY KEY REFERENCES assignments(id),
    node TEXT NOT NULL,
    final_hash TEXT NOT NULL,
    chain_root TEXT NOT NULL,
    document TEXT NOT NULL,             -- the signed commitment as the node sent it
    at INTEGER NOT NULL
);
