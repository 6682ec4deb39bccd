-- PostgreSQL's form of ../0008_compression.sql (docs/STORE.md, "One SQL for both"): the same two
-- updates with jsonb in place of SQLite's json_* functions. A broker's database on PostgreSQL is
-- new when it reaches this migration, so they change no row there; a row they did change would
-- have its spec rewritten in jsonb's key order.
UPDATE jobs SET spec = jsonb_set(spec::jsonb, '{aggregation,compression}', '"none"')::text
    WHERE jsonb_typeof(spec::jsonb -> 'aggregation') = 'object' AND spec::jsonb -> 'aggregation' -> 'compression' IS NULL;
UPDATE jobs SET spec = jsonb_set(spec::jsonb, '{aggregation}', '{"compression": "none"}')::text
    WHERE spec::jsonb -> 'aggregation' IS NULL;
