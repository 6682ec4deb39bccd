#!/usr/bin/env bash
# make bench: what the control API costs a training node (docs/CONTROL.md): the CPU of its control
# thread (HTTP, WebSockets, the state's reads every 2 s) over 20 s with no dashboard open, the
# baseline, and with 5 web dashboards open in Chromium, against the goal of 1% of a core. The node
# trains all along, so its progress is pushed at the most (4 states a second to each page).
# Usage: bench/controlbench.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v node >/dev/null || [ ! -x /usr/bin/chromium ] || [ ! -d "$src/tests/browser/node_modules/playwright-core" ]; then
    echo "control: skipped (Node.js, Chromium or playwright-core missing: ./scripts/install-deps.sh installs them)"
    exit 0
fi
. "$src/scripts/lib/cluster.sh"
trap cluster_stop EXIT INT TERM
cluster_init "$build/app" "$(mktemp -d /tmp/tessera-controlbench-XXXXXX)"
port=$(/usr/bin/python3 "$src/scripts/free_port.py")
cluster_broker "MinDeadlineSeconds=900"
CLUSTER_NODE_SETTINGS="MaxThreads=1\n[Control]\nPort=$port" cluster_node n1
cluster_wait_registered n1
cat >"$CLUSTER_DIR/job.json" <<'JOB'
{ "version": 1, "name": "controlbench", "model": { "zoo": "mlp", "hidden": [128] },
  "dataset": { "builtin": "fashion-mnist" }, "optimizer": { "kind": "sgd", "lr": 0.05 },
  "training": { "rounds": 40, "shardsPerRound": 1, "localSteps": 2000, "batchSize": 64, "seed": 3, "threads": 1,
                "determinism": "portable", "checkpointInterval": 200 },
  "budget": "1000" }
JOB
cluster_job submit "$CLUSTER_DIR/job.json" >/dev/null
pid=${CLUSTER_PIDS[n1]}
until "$build/app/tessera-node" --config "$CLUSTER_DIR/n1.ini" ctl state | grep -q '^working'; do sleep 0.2; done
thread=$(grep -l '^control$' /proc/"$pid"/task/*/comm | head -1 | xargs dirname)
hz=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "$1/stat"; }
# Percent of a core over 20 s: the control thread's, and the whole node's (training included).
measure() {
    local c0 n0 c1 n1
    c0=$(ticks "$thread"); n0=$(ticks "/proc/$pid"); sleep 20; c1=$(ticks "$thread"); n1=$(ticks "/proc/$pid")
    awk -v a="$c0" -v b="$c1" -v m="$n0" -v n="$n1" -v hz="$hz" 'BEGIN { printf "%.3f %.1f", (b - a) / hz / 20 * 100, (n - m) / hz / 20 * 100 }'
}
read -r idle idleNode <<<"$(measure)"
url=$("$build/app/tessera-node" --config "$CLUSTER_DIR/n1.ini" ctl url)
token=${url##*#token=}
node "$src/tests/browser/dashboards.mjs" "http://127.0.0.1:$port" "$token" 5 30 >"$CLUSTER_DIR/dashboards.txt" 2>&1 &
browser=$!
until grep -q "5 open" "$CLUSTER_DIR/dashboards.txt" 2>/dev/null; do
    kill -0 "$browser" 2>/dev/null || { cat "$CLUSTER_DIR/dashboards.txt"; exit 1; }
    sleep 0.2
done
read -r open openNode <<<"$(measure)"
wait "$browser" || true
pushes=$(sed -n 's/^dashboards: pushed states taken: //p' "$CLUSTER_DIR/dashboards.txt")
awk -v idle="$idle" -v open="$open" -v idleNode="$idleNode" -v openNode="$openNode" -v pushes="$pushes" 'BEGIN {
    printf "control: the API thread of a training node used %.2f%% of a core with 5 dashboards open (%.2f%% with none: %.2f%% more; goal 1%%: %s)\n", open, idle, open - idle, open <= 1 ? "met" : "NOT met";
    printf "control: the node process %.1f%% and %.1f%% (its shards train in its sandboxed worker); pushed states each page took in 30 s: %s\n", openNode, idleNode, pushes;
    if (ENVIRON["TESSERA_BENCH_RECORD"] != "") {
        out = ENVIRON["TESSERA_BENCH_RECORD"];
        printf "control.apiCpuPercent5 %.4f\ncontrol.apiCpuPercent0 %.4f\n", open, idle >> out;
    }
}'
