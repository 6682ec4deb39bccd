#!/usr/bin/env bash
# make bench: every benchmark, each against a baseline measured in the same run, then the accuracy
# of the example job trained on this machine alone and by a broker with three nodes (with and
# without re-execution); bench/report.py then writes docs/PERFORMANCE.md and the accuracy plot from
# what was measured. The raw output stays in BUILD/bench-results/.
# Usage: bench/run.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
bin="$build/app"
py=/usr/bin/python3
out="$build/bench-results"
rm -rf "$out"
mkdir -p "$out"
export TESSERA_BENCH_RECORD="$out/records.txt"
: > "$TESSERA_BENCH_RECORD"
step() { echo; echo "== $*"; }
record() { echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

step "shard trainer vs a bare LibTorch loop"
"$build/bench/tessera-bench-trainer" | tee "$out/trainer.txt"
step "broker scheduling"
"$build/bench/tessera-bench-broker" | tee "$out/broker.txt"
step "network: blob transfer, bytes per round, broker load"
"$build/bench/tessera-bench-network" | tee "$out/network.txt"
step "verification policy (simulation)"
"$build/bench/tessera-bench-verification" | tee "$out/verification.txt"
step "device benchmark (tessera-node benchmark)"
printf '[Node]\nDataDirectory=%s/node\n' "$out" > "$out/node.ini"
for threads in 1 2; do
    "$bin/tessera-node" --config "$out/node.ini" benchmark --json --threads "$threads" > "$out/devices-$threads.json"
    "$bin/tessera-node" --config "$out/node.ini" benchmark --last
done
step "desktop app at idle"
"$src/bench/appbench.sh" "$build" | tee "$out/app.txt"

job="$src/examples/jobs/fashion-mnist-mlp.json"
step "the example job on this machine alone (train-local)"
t0=$(now)
"$bin/tessera-node" --config /dev/null train-local "$job" --out "$out/local" | tail -3
record local.wall "$(since "$t0")"

# The example job on a broker and three new nodes over TCP on 127.0.0.1. NAME, extra broker
# settings, job file.
network() {
    local name=$1 settings=$2 jobFile=$3 dir="$out/$1" port
    port=$("$py" "$src/scripts/free_port.py")
    local endpoint="tcp://127.0.0.1:$port"
    mkdir -p "$dir"
    printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\n%s\n' "$dir" "$settings" > "$dir/broker.ini"
    "$bin/tessera-broker" --config "$dir/broker.ini" --bind "$endpoint" > "$dir/broker.log" 2>&1 &
    pids+=($!)
    local jobCmd=("$bin/tessera-job" --config /dev/null --identity "$dir/owner.key" --broker "$endpoint")
    until "${jobCmd[@]}" list > /dev/null 2>&1; do
        kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/broker.log"; exit 1; }
        sleep 0.2
    done
    for n in 1 2 3; do
        printf '[Node]\nDataDirectory=%s/node%s\nName=bench-node-%s\n' "$dir" "$n" "$n" > "$dir/node$n.ini"
        "$bin/tessera-node" --config "$dir/node$n.ini" run --broker "$endpoint" > "$dir/node$n.log" 2>&1 &
        pids+=($!)
    done
    local t0 id
    t0=$(now)
    id=$("${jobCmd[@]}" submit "$jobFile" | tail -1)
    "${jobCmd[@]}" wait "$id" --json > "$dir/job.json"
    record "net.$name.wall" "$(since "$t0")"
    "${jobCmd[@]}" verifications "$id" --json > "$dir/checks.json"
    "${jobCmd[@]}" nodes --json > "$dir/nodes.json"
    "${jobCmd[@]}" ledger | tee "$dir/ledger.txt"
    cleanup
    pids=()
}
step "the example job on a broker and 3 new nodes (every result re-executed while they are new)"
network verified "" "$job"
step "the same with verification off (no sampling, no canaries)"
"$py" -c "import json,sys; j=json.load(open(sys.argv[1])); j['verification']={'rate': 0}; json.dump(j, open(sys.argv[2],'w'))" \
    "$job" "$out/unverified-job.json"
network unverified $'SamplingWarmup=0\nSamplingFloorPercent=0\nCanaryPercent=0' "$out/unverified-job.json"

step "report"
"$py" "$src/bench/report.py" "$out" "$src/bench/PERFORMANCE.md.in" "$src/docs/PERFORMANCE.md" "$src/docs/accuracy-per-round.svg"
