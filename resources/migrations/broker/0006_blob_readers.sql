-- Who may read a blob (GET): whoever uploaded it, the owner of a job that names it or made it (its
-- model, its data, each round's weights), and a node handed work that needs it. A blob's hash is
-- no key to it. docs/PROTOCOL.md, "Who may do what".
CREATE TABLE blob_readers (
    blob TEXT NOT NULL,        -- sha256, hex
    principal TEXT NOT NULL,   -- an account: a client's or node's CURVE key (Z85), or what a plaintext client names
    PRIMARY KEY (blob, principal)
) WITHOUT ROWID;

-- What an operator credited by hand (tessera-broker credit): the ledger has the transfer, this its reason.
CREATE TABLE credits (
    id INTEGER PRIMARY KEY,
    account TEXT NOT NULL,
    amount INTEGER NOT NULL,   -- micro-credits
    memo TEXT NOT NULL,
    at INTEGER NOT NULL        -- ms since the epoch
);
