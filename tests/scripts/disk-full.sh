#!/usr/bin/env bash
# Disk full, on a broker and on a node: each keeps its data folder on a small tmpfs (mounted in a
# private mount namespace, so nothing outlives the test). The test fills the disks and checks that
# every refusal names the full disk, that nothing is lost or half-written (the ledger's invariants,
# SQLite's integrity check, the owner's balance), and that both carry on once space is freed: the job
# then finishes with the same bits as an undisturbed single-machine run.
# Usage: tests/scripts/disk-full.sh BUILD_DIR   (exits 77, "skipped", where it cannot mount a tmpfs)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)

# Root gets a private mount namespace; anyone else a user namespace that maps them to root in it.
if [ -z "${TESSERA_DISK_FULL_NS:-}" ]; then
    if [ "$(id -u)" = 0 ]; then ns=(unshare --mount --propagation private); else ns=(unshare --map-root-user --mount); fi
    if ! "${ns[@]}" sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs "$d" && umount "$d" && rmdir "$d"' 2>/dev/null; then
        echo "disk-full: cannot mount a tmpfs in a private namespace here; skipped"
        exit 77
    fi
    exec env TESSERA_DISK_FULL_NS=1 "${ns[@]}" "$0" "$@"
fi

py=/usr/bin/python3
scratch=$(mktemp -d)
. "$(dirname "$0")/../../scripts/lib/cluster.sh"
cluster_init "$build/app" "$scratch"
cleanup() {
    cluster_stop
    umount "$scratch/broker" "$scratch/node" 2>/dev/null || true
    rm -rf "$scratch"
}
trap cleanup EXIT
log() { echo "disk-full: $*"; }
fail() { log "FAILED: $*"; for f in "$scratch"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
job() { cluster_job "$@"; }
fill() { dd if=/dev/zero of="$1/filler" bs=64k 2>/dev/null || true; sync; }
free_kb() { df --output=avail -k "$1" | tail -1 | tr -d ' '; }

# The broker's and the node's data folders are small disks of their own.
mkdir -p "$scratch/broker" "$scratch/node"
mount -t tmpfs -o size=24m tmpfs "$scratch/broker"
mount -t tmpfs -o size=24m tmpfs "$scratch/node"

cat > "$scratch/job.json" <<JOB
{ "name": "disk-full", "model": { "zoo": "mlp", "hidden": [32] }, "dataset": { "builtin": "fashion-mnist" },
  "optimizer": { "kind": "sgd", "lr": 0.05 },
  "training": { "rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 5, "checkpointInterval": 10 },
  "budget": "20", "verification": { "rate": 0 } }
JOB
"$build/app/tessera-node" --config /dev/null train-local "$scratch/job.json" --out "$scratch/local" >/dev/null
baseline=$(cluster_field finalWeightsHash < "$scratch/local/report.json")

cluster_broker $'CanaryPercent=0\nSamplingWarmup=0\nSelfVerifyAfterSeconds=2' || fail "the broker did not start"
balance() { job balance owner --json 2>/dev/null || job balance 2>&1; }

# 1. A model file larger than the broker's disk: the upload is refused, the partial blob removed.
head -c $((40 << 20)) /dev/urandom > "$scratch/big.pt"
"$py" - "$scratch/job.json" "$scratch/big.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1])); job["model"] = {"torchscript": {"file": "big.pt"}}
json.dump(job, open(sys.argv[2], "w"))
PY
before=$(free_kb "$scratch/broker")
if out=$(job submit "$scratch/big.json" 2>&1); then fail "a 40 MB upload to a 24 MB disk was accepted: $out"; fi
log "40 MB model on a 24 MB disk: $(echo "$out" | tail -1)"
grep -q "the broker's disk is full" <<<"$out" || fail "the refusal does not name the full disk: $out"
grep -q "$scratch" <<<"$out" && fail "the refusal shows the broker's paths: $out"
kill -0 "${CLUSTER_PIDS[broker]}" || fail "the broker died"
after=$(free_kb "$scratch/broker")
[ "$after" -ge $((before - 1024)) ] || fail "the partial upload still takes $((before - after)) kB"

# 2. The broker's database cannot grow: a submission is refused whole, the owner's credits untouched.
fill "$scratch/broker"
owner_before=$(job balance 2>&1 || true)
if out=$(job submit "$scratch/job.json" 2>&1); then fail "a job was accepted on a full disk: $out"; fi
log "job on a full broker disk: $(echo "$out" | tail -1)"
grep -q "the broker's disk is full" <<<"$out" || fail "the refusal does not name the full disk: $out"
job list >/dev/null || fail "the broker does not answer after a full disk"
[ "$(job balance 2>&1 || true)" = "$owner_before" ] || fail "the owner's balance changed: $owner_before -> $(job balance 2>&1)"
job ledger >/dev/null || fail "the ledger's invariants do not hold after a full disk"
rm -f "$scratch/broker/filler"

# 3. The node's disk is full: it cannot keep what it downloads or computes; it says so and lives on.
cluster_node node
# Its keys and database are written before it registers; then its disk fills.
cluster_wait_registered node || fail "the node did not register"
fill "$scratch/node"
jobId=$(job submit "$scratch/job.json") || fail "the job was refused once space was freed"
log "job $jobId submitted to a node whose disk is full"
deadline=$((SECONDS + 120))
until grep -q "the disk is full" "$scratch/node.log" || [ $SECONDS -ge $deadline ]; do
    kill -0 "${CLUSTER_PIDS[node]}" 2>/dev/null || fail "the node died on a full disk"
    sleep 0.2
done
grep -q "the disk is full" "$scratch/node.log" || fail "the node's log never names its full disk"
log "node: $(grep "the disk is full" "$scratch/node.log" | head -1)"
kill -0 "${CLUSTER_PIDS[node]}" || fail "the node died on a full disk"
rm -f "$scratch/node/filler"

# 4. Space again: the job finishes with the bits of the undisturbed run; nothing is corrupt.
final=$(job wait "$jobId" --json | cluster_field weightsHash) \
    || fail "the job did not finish"
[ "$final" = "$baseline" ] || fail "final weights $final differ from the undisturbed run $baseline"
job ledger >/dev/null || fail "the ledger's invariants do not hold"
# The shard the node gave back is held against nobody.
failed=$(job nodes --json | "$py" -c "import json,sys; print(sum(n['shardsFailed'] for n in json.load(sys.stdin)))")
[ "$failed" = 0 ] || fail "a shard given back on a full disk counted as failed ($failed)"
cluster_stop
for db in "$scratch/broker/broker.sqlite" "$scratch/node/node.sqlite"; do
    [ "$(sqlite3 "$db" 'PRAGMA integrity_check')" = ok ] || fail "$db is corrupt"
done
log "passed: refusals name the disk, nothing lost, the job finished with the undisturbed run's bits"
