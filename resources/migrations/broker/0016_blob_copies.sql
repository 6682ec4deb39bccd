-- Several brokers on one PostgreSQL database (docs/STORE.md, "Blobs"): the broker that holds the
-- network keeps a copy of every blob it stores here, in chunks of 1 MiB, so that a broker that
-- takes the network over (its own data folder lost or never had them) finds every job's files,
-- rounds' weights and accepted uploads. A broker on SQLite keeps none (its blobs/ folder is all).
CREATE TABLE blob_copies (
    blob TEXT PRIMARY KEY,                 -- SHA-256, hex
    size INTEGER NOT NULL CHECK (size >= 0),
    complete INTEGER NOT NULL DEFAULT 0    -- 1 once every chunk is in
);
CREATE TABLE blob_chunks (
    blob TEXT NOT NULL,
    idx INTEGER NOT NULL CHECK (idx >= 0),
    bytes BLOB NOT NULL,
    PRIMARY KEY (blob, idx)
);
