#!/usr/bin/env bash
# Chaos run: a job on a broker and three nodes while random nodes and the broker are killed with
# SIGKILL and restarted (same data folders, same port). Kills follow the job's progress, not the
# clock: kill k comes once the job has aggregated k rounds (after a random pause within the round).
# A round takes about a second here, mostly messages and checks, little compute, so a faster CPU
# barely shortens it; the job has 2 x kills + 4 rounds, room for the job to run twice as fast as the
# kills come, so every kill lands while it trains; the run counts them and fails if one did not. At the end the job's final weights must equal an
# undisturbed single-machine run bit for bit, the ledger's invariants must hold, and the nodes'
# earnings must equal one payment per shard and per check, no more.
# Usage: scripts/chaos.sh BUILD_DIR [KILLS] [SEED]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
kills=${2:-20}
seed=${3:-$RANDOM}
RANDOM=$seed
py=/usr/bin/python3
scratch=$(mktemp -d)
. "$(dirname "$0")/lib/cluster.sh"
cluster_init "$build/app" "$scratch"
trap 'cluster_stop; rm -rf "$scratch"' EXIT
log() { echo "chaos: $*"; }
job() { cluster_job "$@"; }

rounds=$((2 * kills + 4))
cat > "$scratch/job.json" <<JOB
{ "name": "chaos", "model": { "zoo": "mlp", "hidden": [64] }, "dataset": { "builtin": "fashion-mnist" },
  "optimizer": { "kind": "sgd", "lr": 0.05, "momentum": 0.9 },
  "training": { "rounds": $rounds, "shardsPerRound": 3, "localSteps": 60, "batchSize": 32, "seed": 3, "checkpointInterval": 10 },
  "budget": "500", "verification": { "rate": 0.2 } }
JOB
"$build/app/tessera-node" --config /dev/null train-local "$scratch/job.json" --out "$scratch/local" >/dev/null
baseline=$(cluster_field finalWeightsHash < "$scratch/local/report.json")
log "seed $seed; baseline $baseline (train-local)"

# "STATE ROUND" of the job, or "? ?" while the broker cannot say.
job_state() {
    job status "$jobId" --json 2>/dev/null | "$py" -c "import json,sys; j=json.load(sys.stdin); print(j['state'], j['round'])" \
        2>/dev/null || echo "? ?"
}

cluster_broker $'CanaryPercent=0\nSamplingWarmup=3\nDisputeTimeoutSeconds=20\nSelfVerifyAfterSeconds=5' || exit 1
for n in node1 node2 node3; do cluster_node "$n"; done
jobId=$(job submit "$scratch/job.json")
log "job $jobId submitted ($rounds rounds); $kills kills to come"

victims=(broker node1 node2 node3)
landed=0
for ((k = 1; k <= kills; k++)); do
    # Kill k waits for round k (at most 5 minutes: a job that stops progressing is a failure too).
    deadline=$((SECONDS + 300))
    while :; do
        read -r state round <<<"$(job_state)"
        [ "$state" = "?" ] || [ "$state" = running ] || { log "FAILED: before kill $k the job is $state"; exit 1; }
        [ "$state" = running ] && [ "$round" -ge "$k" ] && break
        [ $SECONDS -lt $deadline ] || { log "FAILED: the job did not reach round $k in 5 minutes"; cluster_log_tail broker; exit 1; }
        sleep 0.1
    done
    sleep "0.$((RANDOM % 5))" # somewhere in the round: training, checking or aggregating
    victim=${victims[$((RANDOM % 4))]}
    read -r state round <<<"$(job_state)"
    cluster_kill "$victim"
    if [ "$state" = running ] && [ "$round" -lt "$rounds" ]; then
        landed=$((landed + 1))
        log "kill $k/$kills: $victim while the job trains round $((round + 1))/$rounds"
    else
        log "kill $k/$kills: $victim, but the job is $state $round (it should still be training)"
    fi
    sleep "0.$((1 + RANDOM % 5))"
    cluster_start "$victim" || { log "FAILED: $victim did not come back"; exit 1; }
done
log "$landed of $kills kills landed while the job was training"
[ "$landed" -eq "$kills" ] || { log "FAILED: only $landed of $kills kills landed while the job was training"; exit 1; }

log "no more kills; waiting for the job to finish"
final=$(job wait "$jobId" --json | cluster_field weightsHash 2>/dev/null || true)
state=$(job status "$jobId" --json | cluster_field state)
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
