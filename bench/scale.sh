#!/usr/bin/env bash
# make bench, scale part: zoo MLPs of about 1 M, 10 M, 40 M and 100 M parameters and a zoo gpt of
# about 40 M (8 blocks of width 640 on the fortunes text, AdamW), each trained by
# train-local (the baseline, same run) and by a broker with two new nodes over TCP on 127.0.0.1
# (verification as shipped: every result of a new node is re-executed by the other). For each:
# network wall / train-local wall, bytes on the wire per round, peak RSS of a node and of the broker
# (VmHWM; a node's with its compute workers), a node's data folder at its largest, and heartbeats missed ("went silent" in any log).
# Records go to $TESSERA_BENCH_RECORD as "scale.NAME.KEY VALUE" (bench/report.py tables and plots them).
# Usage: bench/scale.sh BUILD_DIR OUT_DIR [NAME...]   (names: 1m 10m 40m 100m gpt40m; default all)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
bin="$build/app"
py=/usr/bin/python3
mkdir -p "$out"
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
. "$src/scripts/lib/cluster.sh"
trap cluster_stop EXIT INT TERM

declare -A hidden=([1m]="[1024, 256]" [10m]="[2048, 2048, 2048]" [40m]="[4096, 4096, 4096]" [100m]="[8192, 8192, 3072]")
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(1m 10m 40m 100m gpt40m)

# The job of a scale point: an MLP on Fashion-MNIST, or the gpt on the text (fewer, smaller steps:
# one of its steps costs about 60 of the 40 M MLP's).
job_of() {
    if [ "$1" = gpt40m ]; then
        cat <<JOB
{"version": 1, "name": "scale $1", "model": {"zoo": "gpt", "layers": 8, "heads": 10, "width": 640, "context": 128},
 "dataset": {"builtin": "fortunes"}, "optimizer": {"kind": "adamw", "lr": 0.001, "weightDecay": 0.1, "clipNorm": 1.0},
 "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 4, "batchSize": 4, "seed": 1, "threads": 1, "checkpointInterval": 2},
 "budget": "100000"}
JOB
    else
        cat <<JOB
{"version": 1, "name": "scale $1", "model": {"zoo": "mlp", "hidden": ${hidden[$1]}},
 "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
 "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 1, "threads": 1},
 "budget": "100000"}
JOB
    fi
}

# Every 0.2 s into FILE: each process's VmHWM (its own peak), a node's resident memory together
# with its compute workers' (its child processes: a node trains in tessera-compute workers, so its
# memory is theirs too), and its data folder (kB).
watch_peaks() {
    local file=$1
    shift
    while sleep 0.2; do
        for entry in "$@"; do
            local name=${entry%%:*} pid=${entry#*:}
            local hwm
            hwm=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
            [ -n "$hwm" ] && echo "rss $name $hwm"
            [ "$name" = broker ] && continue
            local total=0 child
            for child in $pid $(pgrep -P "$pid" 2>/dev/null); do
                total=$((total + $(awk '/VmRSS/ { r = $2 } END { print r + 0 }' "/proc/$child/status" 2>/dev/null || echo 0)))
            done
            echo "tree $name $total"
            echo "disk $name $(du -sk "$CLUSTER_DIR/$name" 2>/dev/null | cut -f1)"
        done >> "$file"
    done
}

for name in "${names[@]}"; do
    echo "== scale: $name"
    dir="$out/scale-$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    job="$dir/job.json"
    job_of "$name" > "$job"
    t0=$(now)
    /usr/bin/time -f "%M" -o "$dir/local.rss" "$bin/tessera-node" --config /dev/null train-local "$job" --out "$dir/local" \
        > "$dir/local.log" 2>&1
    local_wall=$(since "$t0")
    model_bytes=$(stat -c %s "$dir/local/model.pt")
    params=$("$py" -c "import sys, torch; print(sum(t.numel() for t in torch.load(sys.argv[1]).values()))" "$dir/local/model.pt")

    cluster_init "$bin" "$dir/net"
    cluster_broker ""
    cluster_node n1
    cluster_node n2
    watch_peaks "$dir/peaks.txt" "broker:${CLUSTER_PIDS[broker]}" "n1:${CLUSTER_PIDS[n1]}" "n2:${CLUSTER_PIDS[n2]}" &
    watcher=$!
    t0=$(now)
    id=$(cluster_job submit "$job")
    cluster_job wait "$id" --json > "$dir/job-end.json"
    net_wall=$(since "$t0")
    checks=$(cluster_job verifications "$id" --json | "$py" -c "import json,sys; print(len(json.load(sys.stdin)))")
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    silent=$(cat "$CLUSTER_DIR"/*.log | grep -c "went silent" || true)
    cluster_stop
    state=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['state'])" "$dir/job-end.json")

    node_rss=$(awk '($1 == "rss" || $1 == "tree") && $2 != "broker" && $3 > m { m = $3 } END { print m + 0 }' "$dir/peaks.txt")
    broker_rss=$(awk '$1 == "rss" && $2 == "broker" && $3 > m { m = $3 } END { print m + 0 }' "$dir/peaks.txt")
    node_disk=$(awk '$1 == "disk" && $3 > m { m = $3 } END { print m + 0 }' "$dir/peaks.txt")
    # Bytes on the wire per round: every frame the broker received and sent (it prints them when it
    # stops), over the job's 2 rounds: downloads of the round's weights, uploads of the shards'
    # int8 updates, re-executions, heartbeats and the job's client.
    per_round=$(sed -n 's/.*stopped after [0-9]* messages, \([0-9]*\) bytes in, \([0-9]*\) bytes out.*/\1 \2/p' \
        "$CLUSTER_DIR/broker.log" | awk '{ printf "%.0f", ($1 + $2) / 2 }')
    record "scale.$name.params" "$params"
    record "scale.$name.modelBytes" "$model_bytes"
    record "scale.$name.state" "$state"
    record "scale.$name.localWall" "$local_wall"
    record "scale.$name.netWall" "$net_wall"
    record "scale.$name.ratio" "$(awk -v a="$net_wall" -v b="$local_wall" 'BEGIN { printf "%.3f", a / b }')"
    record "scale.$name.checks" "$checks"
    record "scale.$name.bytesPerRound" "$per_round"
    record "scale.$name.localRssMB" "$(awk -v k="$(cat "$dir/local.rss")" 'BEGIN { printf "%.0f", k / 1024 }')"
    record "scale.$name.nodeRssMB" "$(awk -v k="$node_rss" 'BEGIN { printf "%.0f", k / 1024 }')"
    record "scale.$name.brokerRssMB" "$(awk -v k="$broker_rss" 'BEGIN { printf "%.0f", k / 1024 }')"
    record "scale.$name.nodeDiskMB" "$(awk -v k="$node_disk" 'BEGIN { printf "%.0f", k / 1024 }')"
    record "scale.$name.silent" "$silent"
done
