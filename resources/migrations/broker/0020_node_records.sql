-- Portable records a broker credited (docs/LEDGER.md, "Portable records"): once per node and network.
CREATE TABLE node_records (
    node TEXT NOT NULL,
    network TEXT NOT NULL,
    credited INTEGER NOT NULL,   -- the streak the record started the node from
    at INTEGER NOT NULL,
    PRIMARY KEY (node, network)
);
