"""The data order of a chunked dataset, written from docs/DETERMINISM.md ("Data order of a chunked
dataset") alone, with the seeds of the docs-only Python node. Reads a JSON request on stdin:
{"seed", "round", "shard", "sampleBegin", "sampleEnd", "batchSize", "steps", "chunkSamples"} and
prints, per step, its rows as [chunk, index] pairs."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "e2e", "python"))
from python_node import derive, perm  # noqa: E402

CHUNK_ORDER, SEGMENT_PASS = 5, 6


def rows(request):
    seed, r, k = request["seed"], request["round"], request["shard"]
    begin, end, batch = request["sampleBegin"], request["sampleEnd"], request["batchSize"]
    samples = request["chunkSamples"]
    segments = []  # (chunk, first sample in the chunk, length, offset in the slice)
    start = 0
    for chunk in perm(len(samples), derive(seed, [CHUNK_ORDER, r])):
        lo, hi = max(start, begin), min(start + samples[chunk], end)
        if lo < hi:
            segments.append((chunk, lo - start, hi - lo, lo - begin))
        start += samples[chunk]
    length = end - begin
    out = []
    for step in range(request["steps"]):
        batch_rows = []
        for q in range(step * batch, (step + 1) * batch):
            p, o = q // length, q % length
            g = max(i for i, s in enumerate(segments) if s[3] <= o)
            chunk, first, size, offset = segments[g]
            order = perm(size, derive(seed, [SEGMENT_PASS, r, k, p, g]))
            batch_rows.append([chunk, first + order[o - offset]])
        out.append(batch_rows)
    return out


if __name__ == "__main__":
    print(json.dumps(rows(json.load(sys.stdin))))
