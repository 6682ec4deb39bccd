-- The order checks were made in, where two share a millisecond: `rowid` is SQLite's alone, and a
-- PostgreSQL table has no insertion order. Each new check takes the next number.
ALTER TABLE checks ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE checks SET seq = numbered.n
    FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS n FROM checks) AS numbered
    WHERE checks.id = numbered.id;
