#!/usr/bin/env bash
# make demo: a broker and two nodes on this machine, over real ZeroMQ on loopback. Submits the
# Fashion-MNIST MLP job, follows it round by round, fetches the trained model, and stops everything
# it started (also on Ctrl-C).
set -euo pipefail
build=${1:-build}
job=${2:-examples/jobs/fashion-mnist-mlp.json}
bin=$build/app
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-demo.XXXXXX")
port=$(/usr/bin/python3 "$(dirname "$0")/free_port.py")
broker="tcp://127.0.0.1:$port"
pids=()

cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# A local broker: its faucet funds the job owner and bonds the nodes' stake.
printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\n' "$work" > "$work/broker.ini"
"$bin/tessera-broker" --config "$work/broker.ini" --bind "$broker" > "$work/broker.log" 2>&1 &
pids+=($!)
for n in 1 2; do
    printf '[Node]\nDataDirectory=%s/node%s\nName=demo-node-%s\n' "$work" "$n" "$n" > "$work/node$n.ini"
    "$bin/tessera-node" --config "$work/node$n.ini" run --broker "$broker" > "$work/node$n.log" 2>&1 &
    pids+=($!)
done
echo "Broker at $broker and two nodes started (logs in $work)"

id=$("$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" submit "$job" | tail -n 1)
echo "Submitted $job as job $id"
"$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" wait "$id"
"$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" fetch "$id" -o "$work/model.pt"
"$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" ledger
for n in 1 2; do
    key=$(sed -n 's/^public //p' "$work/node$n/node.key")
    earned=$("$bin/tessera-job" --config /dev/null --identity "$work/owner.key" --broker "$broker" balance "$key" | sed 's/.*: \([0-9.]* credits, [0-9.]* bonded\)$/\1/')
    echo "demo-node-$n earned: $earned"
done
echo "The trained weights are in $work/model.pt:"
echo "  /usr/bin/python3 -c \"import torch; print({k: tuple(v.shape) for k, v in torch.load('$work/model.pt').items()})\""
