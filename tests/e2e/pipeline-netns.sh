#!/usr/bin/env bash
# A pipeline job (docs/PROTOCOL.md, "Stage tasks") with each process on a host of its own (ip
# netns, addresses of their own): a broker and four nodes, two pipelines of two stages a round, the
# stages' tensors relayed by the broker between hosts. The job must end on train-local's bits with
# the books balanced. Needs root; exits 77 (skipped) where namespaces cannot be made. TENSORS:
# what the stages trade (training.pipeline.tensors), float32 (the default) or int8.
# Usage: pipeline-netns.sh BIN_DIR [TENSORS]
set -euo pipefail
bin=$(cd "$1" && pwd)
tensors=${2:-float32}
case "$tensors" in float32|int8) ;; *) echo "tensors: float32 or int8, not $tensors"; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeline-netns.XXXXXX")
tag=$(($$ % 10000))
subnet="10.203.$((tag % 250))"
pids=()
. "$here/../../scripts/lib/netns.sh"

cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    netns_cleanup
    if [ -z "${TESSERA_KEEP_TEST_DIRS:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# Host 0: the broker and the job owner's client; 1 to 4: the nodes.
made=0
netns_hosts "tpl$tag" "$subnet" 5 || made=$?
if [ "$made" -eq 1 ]; then
    echo "pipeline-netns: cannot make a bridge (not root, or no netns here): skipped"
    exit 77
fi
[ "$made" -eq 0 ] || { echo "cannot make the hosts' namespaces"; exit 1; }

cat > "$work/job.json" <<JOB
{ "name": "pipelined gpt", "model": { "zoo": "gpt", "layers": 4, "heads": 2, "width": 32, "context": 32, "tied": false },
  "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003, "clipNorm": 1.0 },
  "training": { "rounds": 2, "shardsPerRound": 2, "localSteps": 8, "batchSize": 8, "seed": 4, "checkpointInterval": 4,
                "determinism": "portable", "pipeline": { "stages": 2, "microBatches": 4, "tensors": "$tensors" } },
  "budget": "100" }
JOB
port=$(/usr/bin/python3 "$here/../../scripts/free_port.py")
broker="tcp://$subnet.1:$port"
# Deadlines far beyond any shard's time: the test is about hosts, not the machine's speed.
printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\nCanaryPercent=0\nMinDeadlineSeconds=1200\n' \
    "$work" > "$work/broker.ini"
start_in_host 0 "$bin/tessera-broker" --config "$work/broker.ini" --bind "$broker" --insecure-plaintext >> "$work/broker.log" 2>&1
pids+=($!)
owner() { in_host 0 "$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" "$@"; }
deadline=$((SECONDS + 120))
until owner list > /dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "the broker did not answer"; tail -n 20 "$work"/*.log; exit 1; }
    sleep 0.5
done
for i in 1 2 3 4; do
    printf '[Node]\nDataDirectory=%s/node%d\nName=node-%d\n[Compute]\nBenchmarkOnFirstStart=false\nMaxThreads=1\n' \
        "$work" "$i" "$i" > "$work/node$i.ini"
    start_in_host "$i" "$bin/tessera-node" --config "$work/node$i.ini" run --broker "$broker" >> "$work/node$i.log" 2>&1
    pids+=($!)
done

"$bin/tessera-node" --config /dev/null train-local "$work/job.json" --out "$work/local" > "$work/local.log" 2>&1
expected=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finalWeightsHash"])' "$work/local/report.json")
id=$(owner submit "$work/job.json")
owner wait "$id" --json > "$work/end.json"
got=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["state"], j["weightsHash"])' "$work/end.json")
status=0
if [ "$got" != "finished $expected" ]; then
    echo "FAIL: the job ended as '$got', not finished on train-local's $expected"; tail -n 20 "$work"/*.log
    status=1
fi
# The stages traded through the broker from hosts of their own, not loopback.
hosts=$(grep -c "registered: node-" "$work/broker.log" || true)
[ "$hosts" -ge 4 ] || { echo "FAIL: $hosts nodes registered"; status=1; }
if ! owner ledger > "$work/ledger.txt" 2>&1; then
    echo "FAIL: the books do not balance"; cat "$work/ledger.txt"; status=1
fi
[ $status -eq 0 ] && echo "pipeline-netns: 2 pipelines of 2 stages ($tensors tensors) on 4 hosts ended on train-local's $expected"
exit $status
