-- The network's id (docs/STORE.md, "Several brokers"): one row, made by the first broker that
-- opens the database. Brokers that share a database share it, and name it in WELCOME, so that a
-- node serving several of them knows which are one network (a result its broker could not take
-- goes to another broker of the same network).
CREATE TABLE network (
    id TEXT PRIMARY KEY
);
