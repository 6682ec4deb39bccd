-- The blobs (sha256, in the node's cache) holding the training state at each interior checkpoint
-- of a result, 1..n-2: a dispute over the result asks for one of them. JSON array of hex digests.
ALTER TABLE results ADD COLUMN checkpoints TEXT NOT NULL DEFAULT '[]';
