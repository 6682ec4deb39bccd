-- Shards reveal an int8 update unless a job says otherwise (aggregation.compression, docs/JOBS.md).
-- Jobs stored before that field existed were uncompressed: they say so now, so that their
-- re-executions and disputes derive the same tasks as their first runs did.
UPDATE jobs SET spec = json_set(spec, '$.aggregation.compression', 'none')
    WHERE json_type(spec, '$.aggregation') = 'object' AND json_type(spec, '$.aggregation.compression') IS NULL;
UPDATE jobs SET spec = json_set(spec, '$.aggregation', json_object('compression', 'none'))
    WHERE json_type(spec, '$.aggregation') IS NULL;
