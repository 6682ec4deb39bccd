#!/usr/bin/env bash
# Chaos run: a job on a broker and three nodes while random nodes and the broker are killed with
# SIGKILL at random moments and restarted (same data folders, same port). At the end the job's
# final weights must equal an undisturbed single-machine run bit for bit, the ledger's invariants
# must hold, and the nodes' earnings must equal one payment per shard and per check, no more.
# Usage: scripts/chaos.sh BUILD_DIR [KILLS] [SEED]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
kills=${2:-20}
seed=${3:-$RANDOM}
RANDOM=$seed
bin="$build/app"
py=/usr/bin/python3
scratch=$(mktemp -d)
port=$(/usr/bin/python3 "$(dirname "$0")/free_port.py")
endpoint="tcp://127.0.0.1:$port"
declare -A pids
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$scratch"
}
trap cleanup EXIT
log() { echo "chaos: $*"; }

# Long enough that every kill lands while it trains.
rounds=$((kills / 2 + 6))
cat > "$scratch/job.json" <<JOB
{ "name": "chaos", "model": { "zoo": "mlp", "hidden": [64] }, "dataset": { "builtin": "fashion-mnist" },
  "optimizer": { "kind": "sgd", "lr": 0.05, "momentum": 0.9 },
  "training": { "rounds": $rounds, "shardsPerRound": 3, "localSteps": 60, "batchSize": 32, "seed": 3, "checkpointInterval": 10 },
  "budget": "500", "verification": { "rate": 0.2 } }
JOB
"$bin/tessera-node" --config /dev/null train-local "$scratch/job.json" --out "$scratch/local" >/dev/null
baseline=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['finalWeightsHash'])" "$scratch/local/report.json")
log "seed $seed; baseline $baseline (train-local)"

printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\nCanaryPercent=0\nSamplingWarmup=3\nDisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=5\n' \
    "$scratch" > "$scratch/broker.ini"
start() {
    case $1 in
    broker) "$bin/tessera-broker" --config "$scratch/broker.ini" --bind "$endpoint" >>"$scratch/broker.log" 2>&1 & ;;
    *) printf '[Node]\nDataDirectory=%s/%s\nName=%s\n' "$scratch" "$1" "$1" > "$scratch/$1.ini"
       "$bin/tessera-node" --config "$scratch/$1.ini" run --broker "$endpoint" >>"$scratch/$1.log" 2>&1 & ;;
    esac
    pids[$1]=$!
    disown "${pids[$1]}"
}
job() { "$bin/tessera-job" --config /dev/null --broker "$endpoint" "$@"; }

start broker
until job list >/dev/null 2>&1; do
    kill -0 "${pids[broker]}" 2>/dev/null || { log "FAILED: the broker did not start"; cat "$scratch/broker.log"; exit 1; }
    sleep 0.2
done
for n in node1 node2 node3; do start "$n"; done
jobId=$(job submit "$scratch/job.json" | tail -1)
log "job $jobId submitted; $kills kills to come"

victims=(broker node1 node2 node3)
for ((k = 1; k <= kills; k++)); do
    sleep "$((1 + RANDOM % 3)).$((RANDOM % 10))"
    victim=${victims[$((RANDOM % 4))]}
    state=$(job status "$jobId" --json 2>/dev/null | "$py" -c "import json,sys; j=json.load(sys.stdin); print(j['state'], j['round'])" 2>/dev/null || echo "? ?")
    kill -9 "${pids[$victim]}" 2>/dev/null || true
    while kill -0 "${pids[$victim]}" 2>/dev/null; do sleep 0.05; done
    log "kill $k/$kills: $victim (job: $state)"
    sleep "0.$((2 + RANDOM % 8))"
    start "$victim"
    if [ "$victim" = broker ]; then until job list >/dev/null 2>&1; do sleep 0.2; done; fi
done

log "no more kills; waiting for the job to finish"
final=$(job wait "$jobId" --json | "$py" -c "import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index('{'):])['weightsHash'])" \
    2>/dev/null || true)
state=$(job status "$jobId" --json | "$py" -c "import json,sys; print(json.load(sys.stdin)['state'])")
[ "$state" = finished ] || { log "FAILED: the job is $state"; exit 1; }
[ "$final" = "$baseline" ] || { log "FAILED: final weights $final differ from the undisturbed run $baseline"; exit 1; }
log "final weights equal the undisturbed run bit for bit"
job ledger || { log "FAILED: the ledger's invariants do not hold"; exit 1; }
# One payment per shard and per check that a node re-executed, each at the same price.
job nodes --json > "$scratch/nodes.json"
job verifications "$jobId" --json > "$scratch/checks.json"
job status "$jobId" --json > "$scratch/status.json"
"$py" - "$scratch/nodes.json" "$scratch/checks.json" "$scratch/status.json" "$((rounds * 3))" <<'PY'
import json, sys
from decimal import Decimal
nodes = json.load(open(sys.argv[1])); checks = json.load(open(sys.argv[2])); job = json.load(open(sys.argv[3]))
shards = int(sys.argv[4])
price = Decimal(job["pricePerShard"])
paid_checks = sum(1 for c in checks if c["state"] == "verified" and c["verifier"])
earned = sum(Decimal(n["balance"]) for n in nodes)
slashed = sum(Decimal(n["slashed"]) for n in nodes)
expected = price * (shards + paid_checks)
print(f"chaos: nodes earned {earned} credits = {shards + paid_checks} payments x {price} ({shards} shards, {paid_checks} checks); slashed {slashed}")
if slashed != 0 or earned != expected:
    print("chaos: FAILED: a payment twice, a payment missing, or an honest node slashed"); sys.exit(1)
PY
log "passed: $kills kills, same bits, books balance, every payment once"
