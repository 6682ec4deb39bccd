#!/usr/bin/env bash
# training.determinism portable across the kernel choices other CPUs make by themselves (LibTorch's
# ATen CPU capability, OpenBLAS's core type, the portable matmul's SIMD width) and thread counts:
# whole jobs trained by train-local (three shards a round, three rounds: every round-level
# operation, i.e. FedAvg with int8 updates and Nesterov with whole weights, each carrying averaged
# AdamW state) end on the same weights under every one, where the same job in fast mode ends on
# several.
# Usage: variants.sh BUILD_DIR WORK_DIR
set -euo pipefail
node="$1/app/tessera-node"
work=$2
mkdir -p "$work"
job() { # determinism threads aggregation
    cat <<JOB
{"version": 1, "name": "variants", "model": {"zoo": "mlp", "hidden": [64]}, "dataset": {"builtin": "fashion-mnist"},
 "optimizer": {"kind": "adamw", "lr": 0.003, "clipNorm": 1.0},
 "training": {"rounds": 3, "shardsPerRound": 3, "localSteps": 10, "batchSize": 32, "seed": 3, "threads": $2,
              "determinism": "$1"},
 "aggregation": $3, "budget": "10"}
JOB
}
fedavg='{"method": "fedavg", "compression": "int8", "optimizerState": "averaged"}'
nesterov='{"method": "nesterov", "outerLr": 0.7, "outerMomentum": 0.9, "compression": "none", "optimizerState": "averaged"}'
hash_of() { # job-file env...
    local file=$1
    shift
    env "$@" "$node" --config /dev/null train-local "$file" --out "$work/out" | sed -n 's/^final weights //p'
}
variants=("" ATEN_CPU_CAPABILITY=default ATEN_CPU_CAPABILITY=avx2 ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=Prescott
    OPENBLAS_CORETYPE=Sandybridge OPENBLAS_CORETYPE=Haswell OPENBLAS_CORETYPE=Zen OPENBLAS_CORETYPE=SkylakeX)
run() { # label job-file hashes-file env...: one run's final weights, printed and kept
    local label=$1 file=$2 hashes=$3
    shift 3
    local h
    h=$(hash_of "$file" "$@")
    echo "$label: $h"
    echo "$h" >> "$hashes"
}
# One fast-mode job, to show the variants change something.
job fast 1 "$fedavg" > "$work/fast.json"
: > "$work/fast.hashes"
for v in "${variants[@]}"; do
    run "fast ${v:-as-detected}" "$work/fast.json" "$work/fast.hashes" $v
done
failed=0
for name in fedavg nesterov; do
    aggregation=${!name}
    job portable 1 "$aggregation" > "$work/$name.json"
    : > "$work/$name.hashes"
    for v in "${variants[@]}"; do
        run "portable $name ${v:-as-detected}" "$work/$name.json" "$work/$name.hashes" $v
    done
    # The portable kernels' own SIMD choices (compute/portable/matmul.h): each CPU picks its widest.
    for isa in generic avx2; do
        run "portable $name TESSERA_PORTABLE_ISA=$isa" "$work/$name.json" "$work/$name.hashes" TESSERA_PORTABLE_ISA=$isa
    done
    for threads in 2 4; do
        job portable "$threads" "$aggregation" > "$work/$name-$threads.json"
        run "portable $name threads=$threads" "$work/$name-$threads.json" "$work/$name.hashes"
    done
    distinct=$(sort -u "$work/$name.hashes" | grep -c .)
    echo "distinct final weights: portable $name $distinct of 13 runs"
    [ "$(grep -c . "$work/$name.hashes")" -eq 13 ] && [ "$(grep -vc '^[0-9a-f]\{64\}$' "$work/$name.hashes")" -eq 0 ] \
        || { echo "variants: a run of $name gave no final weights" >&2; failed=1; }
    [ "$distinct" -eq 1 ] || { echo "variants: portable mode ($name) is not portable" >&2; failed=1; }
done
fast=$(sort -u "$work/fast.hashes" | grep -c .)
echo "distinct final weights: fast $fast of 9 runs"
[ "$fast" -ge 2 ] || { echo "variants: fast mode gave one hash: the variants changed nothing, so nothing was shown" >&2; exit 1; }
exit $failed
