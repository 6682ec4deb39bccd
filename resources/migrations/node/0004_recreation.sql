-- What a node needs to re-create a checkpoint state it did not keep (only the middle one is kept,
-- in `checkpoints`, whose other entries are ""): the shard's task as JSON, and the blobs it trains
-- from (JSON array of hex digests: the round's weights first, then the model's and the data's).
ALTER TABLE results ADD COLUMN task TEXT NOT NULL DEFAULT '';
ALTER TABLE results ADD COLUMN inputs TEXT NOT NULL DEFAULT '[]';
