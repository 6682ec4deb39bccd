-- Several brokers on one PostgreSQL database (docs/STORE.md, "Several brokers"): the broker that
-- holds the network lease schedules, verifies and pays; the others stand by and take it over when
-- it lapses. A broker on SQLite holds it without this table (one broker to a file).
CREATE TABLE broker_leases (
    scope TEXT PRIMARY KEY,                -- 'network'
    holder TEXT NOT NULL,                  -- the holding broker's id (DIR/broker.id)
    endpoint TEXT NOT NULL DEFAULT '',     -- where its clients reach it (Broker/Bind)
    expires_at INTEGER NOT NULL,           -- ms since the epoch, on the holder's clock
    generation INTEGER NOT NULL DEFAULT 1  -- one more each time another broker takes it
);
