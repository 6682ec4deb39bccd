#!/usr/bin/env bash
# make bench, compression part: the accuracy cost of int8 updates. Each example job is trained by
# train-local with aggregation.compression "none" (float32 weights, the baseline) and "int8" (the
# default), with its own seed and two more; records "compression.JOB.COMPRESSION.SEED accuracy"
# (final test accuracy, %) to $TESSERA_BENCH_RECORD; bench/report.py averages them.
# Usage: bench/compression.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
mkdir -p "$out"
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }

for job in mlp cnn; do
    for offset in 0 1 2; do
        for compression in none int8; do
            name="$job-$compression-$offset"
            "$py" - "$src/examples/jobs/fashion-mnist-$job.json" "$out/$name.json" "$compression" "$offset" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.setdefault("aggregation", {})["compression"] = sys.argv[3]
spec["training"]["seed"] += int(sys.argv[4])
json.dump(spec, open(sys.argv[2], "w"))
PY
            "$build/app/tessera-node" --config /dev/null train-local "$out/$name.json" --out "$out/$name" > "$out/$name.log"
            accuracy=$("$py" -c 'import json, sys; print("%.2f" % (100 * json.load(open(sys.argv[1]))["rounds"][-1]["testAccuracy"]))' \
                "$out/$name/report.json")
            record "compression.$job.$compression.$offset" "$accuracy"
        done
    done
done
