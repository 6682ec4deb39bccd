#!/usr/bin/env bash
# make bench, limited uplink (docs/SWARM.md; issue 37's goal): whole rounds of a ~40 M-parameter
# job with the broker's uplink capped by the kernel (tc tbf, 100 Mbit/s, on the broker's link),
# each process on its own host: the broker and 8 nodes, each in its own network namespace on one
# bridge (scripts/lib/netns.sh). The same job runs twice: with the blob swarm (as shipped)
# and with every blob by GET from the broker (Broker/Swarm=false). It prints each round's time in
# both and their ratio, and checks that both end on train-local's bits.
# Records, for rounds (a round's whole time) and delivery (until the last node had the round's
# blob): "swarm.KIND.MODE.first", "swarm.KIND.MODE.later" (mean of the rounds between the first and
# the last: nodes hold the previous round and fetch its change; the last also evaluates the test
# set), "swarm.KIND.faster" and "firstFaster".
# Needs root (ip netns, tc); prints "skipped" and exits 0 where namespaces cannot be made.
# Usage: bench/uplink.sh BUILD_DIR OUT_DIR [MBIT]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
mbit=${3:-100}
bin="$build/app"
py=/usr/bin/python3
nodes=8
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/uplink.XXXXXX")
tag=$(($$ % 10000))
subnet="10.202.$((tag % 250))"
pids=()
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }
. "$(dirname "$0")/../scripts/lib/netns.sh"

stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    netns_cleanup
    if [ -z "${TESSERA_KEEP_TEST_DIRS:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# Host 0 is the broker's, hosts 1 to 8 the nodes'.
made=0
netns_hosts "tup$tag" "$subnet" $((nodes + 1)) || made=$?
if [ "$made" -eq 1 ]; then
    echo "uplink: cannot make a bridge (not root, or no netns here): skipped"
    exit 0
fi
[ "$made" -eq 0 ] || { echo "cannot make the hosts' namespaces"; exit 1; }
# The broker's uplink: everything it sends to any node leaves through this one shaped link.
in_host 0 tc qdisc add dev "$(netns_link 0)" root tbf rate "${mbit}mbit" burst 256kb latency 100ms
# Every log line stamped with the time of day: rounds are timed from the broker's log.
export QT_MESSAGE_PATTERN='%{time hh:mm:ss.zzz} %{if-category}%{category}: %{endif}%{message}'

# About 37 M parameters (160 MB of float32 weights; a round's int8 change about 43 MB), one local
# step of a small batch per shard, and the test set evaluated only after the last round (10,000
# images through 37 M parameters take the broker's 2 cores seconds): the transfers, not the
# compute, are what is timed.
job="$work/job.json"
cat > "$job" <<JOB
{"version": 1, "name": "uplink", "model": {"zoo": "mlp", "hidden": [4096, 4096, 4096]},
 "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
 "training": {"rounds": 4, "shardsPerRound": $nodes, "localSteps": 1, "batchSize": 8, "seed": 1, "threads": 1,
              "evaluateEvery": 100},
 "budget": "100000"}
JOB
"$bin/tessera-node" --config /dev/null train-local "$job" --out "$work/local" > "$work/local.log" 2>&1
expected=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["finalWeightsHash"])' "$work/local/report.json")

# One run: MODE swarm or get. Prints "ROUND SECONDS" lines into $work/MODE.rounds.
run() {
    local mode=$1 dir="$work/$1"
    mkdir -p "$dir"
    local port
    port=$($py "$(dirname "$0")/../scripts/free_port.py")
    local endpoint="tcp://$subnet.1:$port"
    local swarm=true
    [ "$mode" = get ] && swarm=false
    # Every result re-executed while a node is new (the shipped warm-up) would double the 2 cores'
    # compute per round: here no result is sampled, so a round is its shards and their blobs.
    printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\nCanaryPercent=0\nSamplingWarmup=0\nSamplingFloorPercent=0\nAuditPercent=0\nSwarm=%s\n' \
        "$dir" "$swarm" > "$dir/broker.ini"
    start_in_host 0 "$bin/tessera-broker" --config "$dir/broker.ini" --bind "$endpoint" --insecure-plaintext >> "$dir/broker.log" 2>&1
    pids+=($!)
    owner() { in_host 0 "$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$endpoint" "$@"; }
    local deadline=$((SECONDS + 120))
    until owner list > /dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { echo "the broker did not answer"; tail -20 "$dir/broker.log"; exit 1; }
        sleep 0.5
    done
    for i in $(seq 1 "$nodes"); do
        printf '[Node]\nDataDirectory=%s/node%d\nName=node-%d\n[Compute]\nBenchmarkOnFirstStart=false\n' "$dir" "$i" "$i" > "$dir/node$i.ini"
        start_in_host "$i" "$bin/tessera-node" --config "$dir/node$i.ini" run --broker "$endpoint" >> "$dir/node$i.log" 2>&1
        pids+=($!)
    done
    local id
    id=$(owner submit "$job")
    owner wait "$id" > "$dir/wait.log"
    owner wait "$id" --json > "$dir/job.json"
    stop_all
    local got
    got=$($py -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["state"], j["weightsHash"])' "$dir/job.json")
    if [ "$got" != "finished $expected" ]; then
        echo "FAIL: $mode ended as '$got', not finished on train-local's $expected"
        exit 1
    fi
    # Each round, from the job's submission or the previous round's aggregation to its own (the
    # broker's log), and its delivery: until the last node had the round's blob (the nodes' logs,
    # "fetched blob"). Every line is stamped with the time of day.
    $py - "$dir" > "$work/$mode.rounds" <<'PY'
import glob, re, sys
def stamp(line):
    h, m, s = line.split(" ", 1)[0].split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)
marks = [stamp(l) for l in open(sys.argv[1] + "/broker.log") if " submitted: " in l or " aggregated: " in l]
fetched = [stamp(l) for f in glob.glob(sys.argv[1] + "/node*.log") for l in open(f) if re.search(r"fetched blob .* from the", l)]
for r in range(len(marks) - 1):
    inside = [t for t in fetched if marks[r] <= t < marks[r + 1]]
    print(r, round(marks[r + 1] - marks[r], 2), round(max(inside) - marks[r], 2) if inside else 0)
PY
    echo "$mode: $(tr '\n' ' ' < "$work/$mode.rounds")"
    grep -h "stopped after reporting" "$dir"/node*.log | sed 's/^/  /' | head -3 || true
}

for mode in ${UPLINK_MODES:-swarm get}; do run "$mode"; done
summary() { # MODE COLUMN: the first round's, and the mean of those between it and the last (which evaluates)
    awk -v c="$2" '{ v[NR] = $c } END { for (i = 2; i < NR; i++) { later += v[i]; n++ } printf "%.1f %.1f", v[1], later / n }' \
        "$work/$1.rounds"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "broker uplink ${mbit} Mbit/s (tc tbf), $nodes nodes each on its own host, a 37 M-parameter MLP:"
for what in rounds:2 delivery:3; do
    read -r swarm_first swarm_later <<< "$(summary swarm "${what#*:}")"
    read -r get_first get_later <<< "$(summary get "${what#*:}")"
    name=${what%:*}
    echo "  $name, first round (147 MB weights to every node): swarm ${swarm_first} s, GET alone ${get_first} s"
    echo "  $name, later rounds (a 37 MB change to every node): swarm ${swarm_later} s, GET alone ${get_later} s"
    record "swarm.$name.swarm.first" "$swarm_first"
    record "swarm.$name.swarm.later" "$swarm_later"
    record "swarm.$name.get.first" "$get_first"
    record "swarm.$name.get.later" "$get_later"
    record "swarm.$name.faster" "$(ratio "$get_later" "$swarm_later")"
    record "swarm.$name.firstFaster" "$(ratio "$get_first" "$swarm_first")"
done
cp "$work"/*.rounds "$out/" 2>/dev/null || true
