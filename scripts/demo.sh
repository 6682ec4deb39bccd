#!/usr/bin/env bash
# make demo: a broker and two nodes on this machine, over real ZeroMQ on loopback. Submits the
# Fashion-MNIST MLP job, follows it round by round, fetches the trained model, and stops everything
# it started (also on Ctrl-C).
set -euo pipefail
build=${1:-build}
job=${2:-examples/jobs/fashion-mnist-mlp.json}
. "$(dirname "$0")/lib/cluster.sh"
cluster_demo "$build/app" tessera-demo "$job"
id=$CLUSTER_JOB_ID
cluster_job wait "$id"
cluster_job fetch "$id" -o "$CLUSTER_DIR/model.pt"
cluster_job ledger
for n in 1 2; do
    key=$(sed -n 's/^public //p' "$CLUSTER_DIR/demo-node-$n/node.key")
    account=$(cluster_job balance "$key" --json)
    echo "demo-node-$n earned: $(cluster_field balance <<<"$account") credits, $(cluster_field stake <<<"$account") bonded"
done
echo "The trained weights are in $CLUSTER_DIR/model.pt:"
echo "  /usr/bin/python3 -c \"import torch; print({k: tuple(v.shape) for k, v in torch.load('$CLUSTER_DIR/model.pt').items()})\""
