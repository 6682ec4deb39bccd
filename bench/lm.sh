#!/usr/bin/env bash
# make bench, language model part: examples/jobs/fortunes-gpt.json trained by tessera-node
# train-local (the network run equals it bit for bit, tests/e2e) against the same model, optimiser,
# schedule and token budget trained by PyTorch alone in one process (bench/lm_reference.py).
# Records lm.tessera.testLoss, lm.reference.testLoss and their walls to $TESSERA_BENCH_RECORD.
# Usage: bench/lm.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
job="$src/examples/jobs/fortunes-gpt.json"
mkdir -p "$out"
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }

t0=$(date +%s.%N)
"$build/app/tessera-node" --config /dev/null train-local "$job" --out "$out/tessera" | tee "$out/tessera.log" | tail -2
record lm.tessera.wall "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')"
record lm.tessera.testLoss "$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["rounds"][-1]["testLoss"])' "$out/tessera/report.json")"
"$build/app/tessera-node" --config /dev/null sample "$out/tessera/model.pt" --job "$job" --tokens 400 --seed 2 > "$out/sample.txt"
"$py" "$src/bench/lm_reference.py" "$job" /usr/share/games/fortunes | tee "$out/reference.log" | head -1
while read -r key value; do record "$key" "$value"; done < <(grep '^lm\.' "$out/reference.log")
