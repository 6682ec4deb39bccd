-- With int8 compression the broker keeps the round's change (W_r - W_{r-1} as an int8 update,
-- docs/DETERMINISM.md "Round weights"): nodes that hold the previous round's weights download it
-- instead of the round's weights. change_base_blob is the previous round's weights blob.
ALTER TABLE jobs ADD COLUMN change_blob TEXT;
ALTER TABLE jobs ADD COLUMN change_base_blob TEXT;
