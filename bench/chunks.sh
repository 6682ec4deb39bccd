#!/usr/bin/env bash
# make bench, chunked datasets (docs/JOBS.md, "Chunked datasets"): a generated text corpus of GIB
# GiB (4 by default; kept out of the repo, in a temporary folder removed at the end) is cut by
# `tessera-job chunk`, uploaded to a broker with the job that trains on it, and trained by two
# nodes; records how long each step took and what the nodes hold of the corpus, against the corpus
# itself (what every node would fetch if the dataset were one file) to $TESSERA_BENCH_RECORD.
# Usage: bench/chunks.sh BUILD_DIR OUT_DIR [GIB]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
gib=${3:-4}
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
mkdir -p "$out"
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
. "$src/scripts/lib/cluster.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-chunks.XXXXXX")
trap 'cluster_stop; rm -rf "$work"' EXIT INT TERM

# The corpus: files of 256 MiB, each the fortunes text (Debian's fortunes) from its own offset,
# over and over.
t0=$(now)
"$py" - "$work/corpus" "$gib" <<'PY'
import glob, os, sys
folder, gib = sys.argv[1], int(sys.argv[2])
os.makedirs(folder)
text = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/share/games/fortunes/*"))
                if "." not in os.path.basename(p))
block = 256 << 20
for i in range(gib * 4):
    start = (i * 7919 * 131) % len(text)
    rotated = text[start:] + text[:start]
    data = rotated * (block // len(rotated) + 1)
    with open(os.path.join(folder, "part-%03d.txt" % i), "wb") as f:
        f.write(data[:block])
PY
corpus_bytes=$(du -sb "$work/corpus" | cut -f1)
record chunks.corpus.bytes "$corpus_bytes"
record chunks.generate.seconds "$(since "$t0")"

t0=$(now)
"$build/app/tessera-job" chunk "$work/corpus" -o "$work/chunks" --context 128 --json > "$out/chunk.json"
record chunks.cut.seconds "$(since "$t0")"
rm -rf "$work/corpus" # the chunks are the corpus now: the disk holds two copies at most
samples=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["dataset"]["chunks"]["trainSamples"])' "$out/chunk.json")
count=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["chunks"])' "$out/chunk.json")
chunk_bytes=$(du -cb "$work"/chunks/chunk-*.pt | tail -1 | cut -f1)
record chunks.count "$count"
record chunks.bytes "$chunk_bytes"

cat > "$work/job.json" <<JSON
{"name": "chunked corpus", "model": {"zoo": "gpt", "layers": 2, "heads": 2, "width": 64, "context": 128},
 "dataset": {"chunks": {"manifestFile": "chunks/manifest.json", "testFile": "chunks/test.pt", "trainSamples": $samples}},
 "optimizer": {"kind": "adamw", "lr": 0.003},
 "training": {"rounds": 2, "shardsPerRound": 4, "localSteps": 20, "batchSize": 16, "seed": 3, "threads": 1},
 "budget": "100"}
JSON
cluster_init "$build/app" "$work/cluster"
# The corpus waits for its job as uploads do; it is larger than the default 4 GiB they may hold.
cluster_broker "MaxUnnamedUploadMiB=$(( (gib + 1) * 1024 ))"
t0=$(now)
id=$(cluster_job submit "$work/job.json" 2>/dev/null)
record chunks.upload.seconds "$(since "$t0")"
cluster_node chunks-node-1
cluster_node chunks-node-2
t0=$(now)
cluster_job wait "$id" --json > "$out/job.json"
record chunks.train.seconds "$(since "$t0")"
# What each node holds of the corpus: the chunks in its cache, by name (their SHA-256).
"$py" - "$work/chunks/manifest.json" "$work/cluster" <<'PY' | while read -r key value; do record "$key" "$value"; done
import json, os, sys
manifest = json.load(open(sys.argv[1]))
sizes = {c["sha256"]: c["bytes"] for c in manifest["chunks"]}
held = []
for node in ("chunks-node-1", "chunks-node-2"):
    names = set()
    for root, _, files in os.walk(os.path.join(sys.argv[2], node)):
        names.update(f for f in files if f in sizes)
    held.append((len(names), sum(sizes[n] for n in names)))
print("chunks.node.chunks", max(h[0] for h in held))
print("chunks.node.bytes", max(h[1] for h in held))
PY
echo "  job $(${py} -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' "$out/job.json")"
