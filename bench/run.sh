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
. "$src/scripts/lib/cluster.sh"
trap cluster_stop EXIT INT TERM

step "shard trainer vs a bare LibTorch loop"
"$build/bench/tessera-bench-trainer" | tee "$out/trainer.txt"
step "inference shards vs a bare LibTorch inference loop"
"$build/bench/tessera-bench-inference" | tee "$out/inference.txt"
step "serving: a gpt on a broker and 1 or 2 nodes against the same model in one process"
"$build/bench/tessera-bench-serve" "$bin" | tee "$out/serve.txt"
# A PostgreSQL server for the broker and network benches (their PostgreSQL figures), where
# postgresql-15 is installed.
. "$src/scripts/lib/postgres.sh"
if pg_start "$(mktemp -d /tmp/tessera-pg-XXXXXX)"; then
    export TESSERA_BENCH_POSTGRES="$PG_URI"
fi
step "broker scheduling (on SQLite, and on PostgreSQL where postgresql-15 is installed)"
"$build/bench/tessera-bench-broker" | tee "$out/broker.txt"
step "failover: two brokers on PostgreSQL, the active one killed with its data folder (root only)"
"$src/tests/e2e/brokers-netns.sh" "$bin" "$src/examples/jobs/fashion-mnist-mlp.json" | tee "$out/failover.txt" || true
step "network: blob transfer, bytes per round, broker load (on SQLite, and on PostgreSQL: two brokers)"
"$build/bench/tessera-bench-network" | tee "$out/network.txt"
pg_stop
unset TESSERA_BENCH_POSTGRES
step "blob swarm: the broker's bytes for a round's blob with 4, 16 and 32 nodes (the first dials the seed, and every node)"
"$build/bench/tessera-bench-swarm" | tee "$out/swarm.txt"
"$build/bench/tessera-bench-swarm" --plain | tee "$out/swarm-plain.txt"
"$build/bench/tessera-bench-swarm" --uplink | tee "$out/swarm-uplink.txt"
"$build/bench/tessera-bench-swarm" --uplink --plain | tee "$out/swarm-uplink-plain.txt"
step "limited uplink: whole rounds of a 37 M job, 8 nodes, the broker behind tc tbf 100 Mbit/s (root only)"
"$src/bench/uplink.sh" "$build" "$out/uplink"
step "pipeline stages: 2 stages against the whole shard (tokens/s), and each stage's peak memory alone"
"$build/bench/tessera-bench-pipeline" | tee "$out/pipeline.txt"
step "verification policy (simulation)"
"$build/bench/tessera-bench-verification" | tee "$out/verification.txt"
step "device benchmark (tessera-node benchmark)"
printf '[Node]\nDataDirectory=%s/node\n' "$out" > "$out/node.ini"
for threads in 1 2; do
    "$bin/tessera-node" --config "$out/node.ini" benchmark --json --threads "$threads" > "$out/devices-$threads.json"
    "$bin/tessera-node" --config "$out/node.ini" benchmark --last
done
step "scale: models of about 1 M, 10 M, 40 M and 100 M parameters on a broker and two nodes"
"$src/bench/scale.sh" "$build" "$out"
step "compression: the example jobs with float32 weights and with int8 updates (train-local, 3 seeds)"
"$src/bench/compression.sh" "$build" "$out/compression"
step "language model: the Fortunes GPT by train-local and by PyTorch alone (same model, optimiser, schedule, tokens)"
"$src/bench/lm.sh" "$build" "$out/lm"
step "chunked datasets: a 4 GiB text corpus cut, uploaded and trained on by two nodes"
"$src/bench/chunks.sh" "$build" "$out/chunks"
step "desktop app at idle"
"$src/bench/appbench.sh" "$build" | tee "$out/app.txt"
step "the control API: its thread's CPU on a training node with 5 web dashboards open in Chromium"
"$src/bench/controlbench.sh" "$build" | tee "$out/control.txt"

job="$src/examples/jobs/fashion-mnist-mlp.json"
step "the example job on this machine alone (train-local)"
t0=$(now)
"$bin/tessera-node" --config /dev/null train-local "$job" --out "$out/local" | tail -3
record local.wall "$(since "$t0")"

# The example job on a broker and three new nodes over TCP on 127.0.0.1 (scripts/lib/cluster.sh).
# NAME, extra broker settings, job file.
network() {
    local name=$1 settings=$2 jobFile=$3 t0 id
    cluster_init "$bin" "$out/$name"
    cluster_broker "$settings"
    for n in 1 2 3; do cluster_node "bench-node-$n"; done
    t0=$(now)
    id=$(cluster_job submit "$jobFile")
    cluster_job wait "$id" --json > "$CLUSTER_DIR/job.json"
    record "net.$name.wall" "$(since "$t0")"
    cluster_job verifications "$id" --json > "$CLUSTER_DIR/checks.json"
    cluster_job nodes --json > "$CLUSTER_DIR/nodes.json"
    cluster_job ledger | tee "$CLUSTER_DIR/ledger.txt"
    cluster_stop
}
step "the example job on a broker and 3 new nodes (every result re-executed while they are new)"
network verified "" "$job"
step "the same with verification off (no sampling, no canaries)"
"$py" -c "import json,sys; j=json.load(open(sys.argv[1])); j['verification']={'rate': 0}; json.dump(j, open(sys.argv[2],'w'))" \
    "$job" "$out/unverified-job.json"
network unverified $'SamplingWarmup=0\nSamplingFloorPercent=0\nCanaryPercent=0' "$out/unverified-job.json"

step "report"
"$py" "$src/bench/report.py" "$out" "$src/bench/PERFORMANCE.md.in" "$src/docs/PERFORMANCE.md" "$src/docs/accuracy-per-round.svg"
