#!/usr/bin/env bash
# Failover between brokers on one PostgreSQL database (docs/STORE.md, "Several brokers"), each
# process on a host of its own (ip netns): the database, two brokers and two nodes that serve both.
# The example job is submitted through the first broker and a short one through the second: both
# brokers serve the network at once, each its own job, and a node's balance reads the same through
# either. While the example job trains, its broker is killed (-9) and its data folder deleted; the
# second takes the job over once its lease lapses, and the job ends on train-local's bits, the books
# balanced and each shard of each round of both jobs paid once. Prints the seconds from the kill to
# the takeover and to the first result the second broker took in for that job (accepted, or held
# for its check). Needs root; exits 77 (skipped) where namespaces cannot be made or PostgreSQL is
# not installed.
# Usage: brokers-netns.sh BIN_DIR JOB_FILE
set -euo pipefail
bin=$(cd "$1" && pwd)
job=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/brokers-netns.XXXXXX")
tag=$(($$ % 10000))
subnet="10.202.$((tag % 250))"
pids=()
nodes=()
. "$here/../../scripts/lib/netns.sh"
. "$here/../../scripts/lib/postgres.sh"

cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pg_stop
    netns_cleanup
    if [ -z "${TESSERA_KEEP_TEST_DIRS:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# Host 0: the database (and the job owner's client); 1 and 2: the brokers; 3 and 4: the nodes.
made=0
netns_hosts "tbk$tag" "$subnet" 5 || made=$?
if [ "$made" -eq 1 ]; then
    echo "brokers-netns: cannot make a bridge (not root, or no netns here): skipped"
    exit 77
fi
[ "$made" -eq 0 ] || { echo "cannot make the hosts' namespaces"; exit 1; }
PG_RUN=(in_host 0)
started=0
pg_start "$(mktemp -d /tmp/tessera-pg-XXXXXX)" "$subnet.1" "$subnet.0/24" || started=$?
if [ "$started" -eq 77 ]; then
    echo "brokers-netns: PostgreSQL is not installed: skipped"
    exit 77
fi
[ "$started" -eq 0 ] || { echo "PostgreSQL did not start"; cat "$PG_DIR"/*.log 2>/dev/null | tail -n 20; exit 1; }

port=$(/usr/bin/python3 "$here/../../scripts/free_port.py")
first="tcp://$subnet.2:$port"
second="tcp://$subnet.3:$port"
export QT_MESSAGE_PATTERN='%{time yyyy-MM-ddTHH:mm:ss.zzz} %{category} %{message}'
start_broker() { # HOST NAME ENDPOINT
    # Deadlines far beyond any shard's time: on a loaded machine no shard times out (the test is
    # about the brokers, not the machine's speed).
    printf '[Broker]\nDataDirectory=%s/%s\nDatabase=%s\nFaucet=true\nCanaryPercent=0\nMinDeadlineSeconds=1200\n' \
        "$work" "$2" "$PG_TCP_URI" > "$work/$2.ini"
    QT_LOGGING_RULES='tessera.broker.debug=true' start_in_host "$1" "$bin/tessera-broker" --config "$work/$2.ini" \
        --bind "$3" --insecure-plaintext >> "$work/$2.log" 2>&1
    pids+=($!)
}
owner() { # BROKER ARGS...
    local broker=$1
    shift
    in_host 0 "$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" "$@"
}
network() { # BROKER BROKER ARGS...: a client that knows both brokers of the network, in that order
    local one=$1 two=$2
    shift 2
    in_host 0 "$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$one" --broker "$two" "$@"
}
answers() { # BROKER
    local deadline=$((SECONDS + 120))
    until owner "$1" list > /dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { echo "broker $1 did not answer"; tail -n 20 "$work"/*.log; exit 1; }
        sleep 0.5
    done
}
start_broker 1 first "$first"
firstPid=$!
answers "$first"
start_broker 2 second "$second"
answers "$second"
for i in 3 4; do
    printf '[Node]\nDataDirectory=%s/node%d\nName=node-%d\n[Compute]\nBenchmarkOnFirstStart=false\n' "$work" "$i" "$i" > "$work/node$i.ini"
    start_in_host "$i" "$bin/tessera-node" --config "$work/node$i.ini" run --broker "$first" --broker "$second" >> "$work/node$i.log" 2>&1
    pids+=($!)
    nodes+=($!)
done

"$bin/tessera-node" --config /dev/null train-local "$job" --out "$work/local" > "$work/local.log" 2>&1
expected=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finalWeightsHash"])' "$work/local/report.json")
# The example job through the first broker, a short one (2 rounds of 2 shards) through the second.
id=$(network "$first" "$second" submit "$job")
/usr/bin/python3 -c 'import json,sys
j = json.load(open(sys.argv[1])); j["name"] = "short"; j["training"].update(rounds=2, shardsPerRound=2)
json.dump(j, open(sys.argv[2], "w"))' "$job" "$work/short.json"
short=$(network "$second" "$first" submit "$work/short.json")
round() { owner "$1" status "$id" --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["round"])' 2>/dev/null || echo -1; }
# Waited for as long as rounds keep coming (a loaded machine is slow, not stuck): a failure only
# where no round came for 10 minutes.
last=-1
deadline=$((SECONDS + 600))
until [ "$(round "$first")" -ge 3 ]; do
    now=$(round "$first")
    if [ "$now" != "$last" ]; then last=$now; deadline=$((SECONDS + 600)); fi
    [ $SECONDS -lt $deadline ] || { echo "FAIL: round 3 never came (stuck at round $last)"; tail -n 20 "$work"/*.log; exit 1; }
    sleep 0.2
done
# One network, one ledger: a node's balance reads the same through either broker.
account=$(head -1 "$work/node3/node.key" | cut -d' ' -f2)
viaFirst=$(owner "$first" balance "$account")
viaSecond=$(owner "$second" balance "$account")
if [ "$viaFirst" != "$viaSecond" ] || [ -z "$viaFirst" ]; then
    echo "FAIL: node 3's balance is '$viaFirst' through the first broker and '$viaSecond' through the second"
    exit 1
fi
shortState=$(owner "$second" wait "$short" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
[ "$shortState" = finished ] || { echo "FAIL: the short job ended $shortState on the second broker"; exit 1; }
grep -q "result of job $short" "$work/second.log" || { echo "FAIL: the second broker did not run its own job"; exit 1; }
if grep -q "result of job $short" "$work/first.log"; then echo "FAIL: the first broker took the second's job's results"; exit 1; fi
killedAt=$(date +%s.%N)
kill -9 "$firstPid"
wait "$firstPid" 2>/dev/null || true
rm -rf "$work/first"
echo "killed the first broker at round $(round "$second") and deleted its data folder"
# Waited for through the dead broker first: the client finds it silent and asks the other.
network "$first" "$second" wait "$id" --json > "$work/job.json"
got=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["state"], j["weightsHash"])' "$work/job.json")

status=0
if [ "$got" != "finished $expected" ]; then
    echo "FAIL: the job ended as '$got', not finished on train-local's $expected"
    status=1
fi
if ! owner "$second" ledger > "$work/ledger.txt" 2>&1; then
    echo "FAIL: the books do not balance"; cat "$work/ledger.txt"
    status=1
fi
# Each shard of each round paid once (a cause pays once: pay:JOB/ROUND/SHARD), read from the database.
rounds=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["training"]["rounds"])' "$job")
shards=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["training"]["shardsPerRound"])' "$job")
payments() { "$PG_BIN/psql" -h "$PG_DIR" -U tessera -d tessera -At -c "SELECT count(*) FROM ledger_transfers WHERE cause LIKE 'pay:$1/%'" 2>&1 || true; }
paid=$(payments "$id")
if [ "$paid" != "$((rounds * shards))" ]; then
    echo "FAIL: $paid shard payments, not $((rounds * shards))"
    status=1
fi
shortPaid=$(payments "$short")
[ "$shortPaid" = 4 ] || { echo "FAIL: $shortPaid payments for the short job's 4 shards"; status=1; }
seconds() { /usr/bin/python3 -c 'import sys, datetime as d
t = d.datetime.fromisoformat(sys.argv[1]).replace(tzinfo=d.timezone.utc).timestamp()
print(f"{t - float(sys.argv[2]):.1f}")' "$1" "$killedAt"; }
took=$(awk -v job="$id" '$0 ~ "taking job " job " over" { print $1; exit }' "$work/second.log")
accepted=$(awk -v t="$took" -v job="$id" '$1 > t && $0 ~ "result of job " job ".*: (accepted|sampled)$" { print $1; exit }' "$work/second.log")
[ -n "$took" ] || { echo "FAIL: the second broker never took the job over"; status=1; }
[ -n "$accepted" ] || { echo "FAIL: the second broker took in no result after it took over"; status=1; }
for pid in "${nodes[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: a node died on the way (pid $pid)"; status=1; }
done
after=$(owner "$second" balance "$account")
echo "node 3: $viaFirst before the kill (either broker), $after after the job"
if [ "$after" = "$viaFirst" ]; then
    echo "FAIL: node 3 earned nothing through the second broker"
    status=1
fi
if [ "$status" -eq 0 ] && [ -n "${TESSERA_BENCH_RECORD:-}" ]; then # make bench: the failover's times
    echo "failover.takeoverS $(seconds "$took")" >> "$TESSERA_BENCH_RECORD"
    echo "failover.firstResultS $(seconds "$accepted")" >> "$TESSERA_BENCH_RECORD"
fi
# The ledger's log across hosts (docs/LEDGER.md): both brokers sign heads of the one log in the
# database; the nodes ask both, keep one head and never flag the honest network; the audit through
# the broker that is left agrees with every figure.
for i in 3 4; do
    if grep -q "LEDGER LOG BROKEN" "$work/node$i.log"; then echo "FAIL: node $i flagged an honest network's log"; status=1; fi
    [ -s "$work/node$i/log-heads.json" ] || { echo "FAIL: node $i kept no head of the ledger's log"; status=1; }
done
if audit=$(owner "$second" audit 2>&1); then
    echo "$audit" | tail -n 1
else
    echo "FAIL: the audit through the second broker: $audit"
    status=1
fi
# Results a node had not reported when the first broker died go through its session with the
# second (docs/PROTOCOL.md, "Several brokers of one network"): how many, where one was in flight
# (shards this small are mostly reported before the kill; tst_nodeclient tests the handing on).
handed=$(cat "$work"/node*.log | grep -c "delivering the result of" || true)
echo "results handed from the first broker's sessions to the second's: $handed"
if [ "$status" -eq 0 ]; then
    echo "brokers-netns: the job ended on train-local's bits on the second broker; books balanced; $paid shard payments; takeover $(seconds "$took") s and first result taken in $(seconds "$accepted") s after the kill"
else
    tail -n 15 "$work"/node*.log "$work"/*.log
fi
exit "$status"
