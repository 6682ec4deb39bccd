#!/usr/bin/env bash
# The blob swarm between hosts (docs/SWARM.md, "NAT"): a broker and three nodes, each in its own
# network namespace with its own address on a bridge (ip netns, veth pairs), so that peers talk over
# real interfaces and the broker names each node by the address its connection came from. The
# example job ends on train-local's bits, and the nodes took the rounds from each other.
# Needs root (ip netns); exits 77 (skipped) where namespaces cannot be made.
# Usage: swarm-netns.sh BIN_DIR JOB_FILE
set -euo pipefail
bin=$(cd "$1" && pwd)
job=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/swarm-netns.XXXXXX")
tag=$(($$ % 10000))
subnet="10.201.$((tag % 250))"
pids=()
. "$(dirname "$0")/../../scripts/lib/netns.sh"

cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    netns_cleanup
    if [ -z "${TESSERA_KEEP_TEST_DIRS:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# Host i at SUBNET.(i+1); host 0 is the broker's.
made=0
netns_hosts "tsw$tag" "$subnet" 4 || made=$?
if [ "$made" -eq 1 ]; then
    echo "swarm-netns: cannot make a bridge (not root, or no netns here): skipped"
    exit 77
fi
[ "$made" -eq 0 ] || { echo "cannot make the hosts' namespaces"; exit 1; }

port=$(/usr/bin/python3 "$(dirname "$0")/../../scripts/free_port.py")
endpoint="tcp://$subnet.1:$port"
printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\nCanaryPercent=0\n' "$work" > "$work/broker.ini"
start_in_host 0 "$bin/tessera-broker" --config "$work/broker.ini" --bind "$endpoint" --insecure-plaintext >> "$work/broker.log" 2>&1
pids+=($!)
owner() { in_host 0 "$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$endpoint" "$@"; }
deadline=$((SECONDS + 120))
until owner list > /dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "the broker did not answer"; tail -20 "$work/broker.log"; exit 1; }
    sleep 0.5
done
nodes=()
for i in 1 2 3; do
    printf '[Node]\nDataDirectory=%s/node%d\nName=node-%d\n[Compute]\nBenchmarkOnFirstStart=false\n' "$work" "$i" "$i" > "$work/node$i.ini"
    start_in_host "$i" "$bin/tessera-node" --config "$work/node$i.ini" run --broker "$endpoint" >> "$work/node$i.log" 2>&1
    pids+=($!)
    nodes+=($!)
done

"$bin/tessera-node" --config /dev/null train-local "$job" --out "$work/local" > "$work/local.log" 2>&1
expected=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finalWeightsHash"])' "$work/local/report.json")
id=$(owner submit "$job")
owner wait "$id" --json > "$work/job.json"
got=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["state"], j["weightsHash"])' "$work/job.json")
for pid in "${nodes[@]}"; do kill -TERM "$pid"; done
for pid in "${nodes[@]}"; do wait "$pid" || true; done

status=0
if [ "$got" != "finished $expected" ]; then
    echo "FAIL: the job ended as '$got', not finished on train-local's $expected"
    status=1
fi
swarmed=0
served=0
for i in 1 2 3; do
    line=$(grep -h "stopped after reporting" "$work/node$i.log" | tail -1)
    echo "node$i: $line"
    taken=$(echo "$line" | sed -nE 's/.*blobs: ([0-9]+) from the swarm.*/\1/p')
    given=$(echo "$line" | sed -nE 's/.*served ([0-9]+) bytes.*/\1/p')
    swarmed=$((swarmed + ${taken:-0}))
    served=$((served + ${given:-0}))
done
if [ "$swarmed" -lt 15 ] || [ "$served" -le 0 ]; then
    echo "FAIL: the nodes took $swarmed blobs from the swarm and served $served bytes to each other"
    status=1
fi
if [ "$status" -eq 0 ]; then
    echo "swarm-netns: broker and 3 nodes on $subnet.0/24 ended on train-local's bits; $swarmed blobs from the swarm, $served bytes between nodes"
else
    tail -n 5 "$work"/node*.log "$work/broker.log"
fi
exit "$status"
