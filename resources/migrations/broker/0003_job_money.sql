-- Who pays for a job and what each accepted shard earns its provider.
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT 'local';
ALTER TABLE jobs ADD COLUMN price_per_shard INTEGER NOT NULL DEFAULT 0;
