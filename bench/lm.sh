#!/usr/bin/env bash
# make bench, language model part: examples/jobs/fortunes-gpt.json trained by tessera-node
# train-local (the network run equals it bit for bit, tests/e2e) against the same model, optimiser,
# schedule and token budget trained by PyTorch alone in one process (bench/lm_reference.py).
# Records lm.tessera.testLoss, lm.reference.testLoss and their walls to $TESSERA_BENCH_RECORD.
# Usage: bench/lm.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
job="$src/examples/jobs/fortunes-gpt.json"
mkdir -p "$out"
record() { [ -n "${TESSERA_BENCH_RECORD:-}" ] && echo "$1 $2" >> "$TESSERA_BENCH_RECORD"; echo "  $1 $2"; }

t0=$(date +%s.%N)
"$build/app/tessera-node" --config /dev/null train-local "$job" --out "$out/tessera" | tee "$out/tessera.log" | tail -2
record lm.tessera.wall "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')"
record lm.tessera.testLoss "$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["rounds"][-1]["testLoss"])' "$out/tessera/report.json")"
"$build/app/tessera-node" --config /dev/null sample "$out/tessera/model.pt" --job "$job" --tokens 400 --seed 2 > "$out/sample.txt"
"$py" "$src/bench/lm_reference.py" "$job" /usr/share/games/fortunes | tee "$out/reference.log" | head -1
while read -r key value; do record "$key" "$value"; done < <(grep '^lm\.' "$out/reference.log")

# Time to loss: the same model on a broker and two nodes of one thread each over TCP on 127.0.0.1
# (scripts/lib/cluster.sh), tuned for time (bench/fortunes-gpt-time.json: its own rounds, H and
# schedule), against PyTorch's wall above. The broker re-executes a sample of results as in any
# network, but not every result of its two new nodes (SamplingWarmup=0: the sampling floor and the
# job's rate stay). A round's time is when its weights were aggregated (the history's finishedAt),
# from the moment the job was submitted.
. "$src/scripts/lib/cluster.sh"
trap cluster_stop EXIT INT TERM
cluster_init "$build/app" "$out/network"
cluster_broker $'SamplingWarmup=0'
for n in 1 2; do cluster_node "lm-node-$n"; done
for n in 1 2; do cluster_wait_registered "lm-node-$n"; done
submitted=$(date +%s%3N)
id=$(cluster_job submit "$src/bench/fortunes-gpt-time.json")
cluster_job wait "$id" > /dev/null
cluster_job status "$id" --json > "$out/network/status.json"
cluster_job verifications "$id" --json > "$out/network/checks.json"
cluster_stop
"$py" - "$out/network/status.json" "$submitted" "$out/reference.log" "$out/network/checks.json" <<'PY' | while read -r key value; do record "$key" "$value"; done
import datetime, json, sys
status = json.load(open(sys.argv[1]))
print("lm.network.reexecuted %d" % len(json.load(open(sys.argv[4]))))
training = status["spec"]["training"]
print("lm.network.jobRounds %d" % training["rounds"])
print("lm.network.jobLocalSteps %d" % training["localSteps"])
print("lm.network.jobEvaluateEvery %d" % training.get("evaluateEvery", 1))
print("lm.network.tokensRatio %.3f" % (training["rounds"] * training["shardsPerRound"] * training["localSteps"]
                                      * training["batchSize"] / (600.0 * 32)))
submitted = int(sys.argv[2]) / 1000.0
target = float([l.split()[1] for l in open(sys.argv[3]) if l.startswith("lm.reference.testLoss")][0])
history = status["history"]
def at(entry):
    return datetime.datetime.fromisoformat(entry["finishedAt"].replace("Z", "+00:00")).timestamp() - submitted
reached = [e for e in history if e["testLoss"] <= target]
print("lm.network.rounds %d" % len(history))
print("lm.network.testLoss %.6f" % history[-1]["testLoss"])
print("lm.network.wall %.3f" % at(history[-1]))
print("lm.network.firstRound %.3f" % at(history[0]))
if len(history) > 1:
    print("lm.network.secondsPerRound %.3f" % ((at(history[-1]) - at(history[0])) / (history[-1]["round"] - history[0]["round"])))
if reached:
    print("lm.network.toTarget %.3f" % at(reached[0]))
    print("lm.network.targetRound %d" % (reached[0]["round"] + 1))
for e in history:
    print("lm.network.round%d.seconds %.3f" % (e["round"] + 1, at(e)))
    print("lm.network.round%d.testLoss %.6f" % (e["round"] + 1, e["testLoss"]))
PY
