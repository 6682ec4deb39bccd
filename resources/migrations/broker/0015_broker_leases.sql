-- Several brokers on one PostgreSQL database (docs/STORE.md, "Several brokers"): the broker that
-- holds a job's lease ('job:ID') schedules, verifies and pays for that job, and another takes it
-- over when it lapses; the 'network' lease gives the network's chores to one broker at a time. A
-- broker on SQLite holds everything without this table (one broker to a file).
CREATE TABLE broker_leases (
    scope TEXT PRIMARY KEY,                -- 'network', or 'job:' and a job's id
    holder TEXT NOT NULL,                  -- the holding broker's id (DIR/broker.id)
    endpoint TEXT NOT NULL DEFAULT '',     -- where its clients reach it (Broker/Bind)
    expires_at INTEGER NOT NULL,           -- ms since the epoch, on the holder's clock
    generation INTEGER NOT NULL DEFAULT 1  -- one more each time another broker takes it
);
