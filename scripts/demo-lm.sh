#!/usr/bin/env bash
# make demo-lm: a broker and two nodes on this machine train the Fortunes GPT
# (examples/jobs/fortunes-gpt.json) over real ZeroMQ on loopback. After each round it prints the
# test loss, its perplexity and text written by the round's weights (the same seed every round, so
# the text shows the model go from noise to words), and stops everything it started (also on Ctrl-C).
set -euo pipefail
build=${1:-build}
job=${2:-examples/jobs/fortunes-gpt.json}
. "$(dirname "$0")/lib/cluster.sh"
cluster_demo "$build/app" tessera-demo-lm "$job"
id=$CLUSTER_JOB_ID
shown=0
while :; do
    status=$(cluster_job status "$id" --json)
    state=$(cluster_field state <<<"$status")
    rounds=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)["history"]))' <<<"$status")
    while [ "$shown" -lt "$rounds" ]; do
        /usr/bin/python3 -c '
import json, math, sys
job = json.load(sys.stdin)
r = job["history"][int(sys.argv[1])]
print("round %d/%d  test loss %.4f  perplexity %.2f  token accuracy %.2f%%" % (
    r["round"] + 1, job["rounds"], r["testLoss"], math.exp(r["testLoss"]), 100 * r["testAccuracy"]))' "$shown" <<<"$status"
        shown=$((shown + 1))
        if [ "$shown" -eq "$rounds" ]; then
            cluster_job sample "$id" --prompt "The " --tokens 160 --seed 1 | sed 's/^/    | /'
        fi
    done
    [ "$state" = running ] || break
    sleep 1
done
echo "The job $state. Its final text (600 tokens, seed 2):"
cluster_job sample "$id" --tokens 600 --seed 2 | sed 's/^/    | /'
cluster_job fetch "$id" -o "$CLUSTER_DIR/model.pt"
cluster_job ledger
echo "The trained weights are in $CLUSTER_DIR/model.pt; more text:"
echo "  $build/app/tessera-job --broker $CLUSTER_ENDPOINT sample $id --prompt 'Life is' (while the broker runs)"
echo "  $build/app/tessera-node sample $CLUSTER_DIR/model.pt --job $job --prompt 'Life is'"
[ "$state" = finished ]
