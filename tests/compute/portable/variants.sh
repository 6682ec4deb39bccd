#!/usr/bin/env bash
# training.determinism portable across the kernel choices other CPUs make by themselves (LibTorch's
# ATen CPU capability, OpenBLAS's core type, the portable matmul's SIMD width) and thread counts: a job trained by train-local ends on
# the same weights under every one, where the same job in fast mode ends on several.
# Usage: variants.sh BUILD_DIR WORK_DIR
set -euo pipefail
node="$1/app/tessera-node"
work=$2
mkdir -p "$work"
job() { # determinism threads
    cat <<JOB
{"version": 1, "name": "variants", "model": {"zoo": "mlp", "hidden": [64]}, "dataset": {"builtin": "fashion-mnist"},
 "optimizer": {"kind": "adam", "lr": 0.003, "clipNorm": 1.0},
 "training": {"rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 32, "seed": 3, "threads": $2,
              "determinism": "$1"}, "budget": "10"}
JOB
}
hash_of() { # job-file env...
    local file=$1
    shift
    env "$@" "$node" --config /dev/null train-local "$file" --out "$work/out" | sed -n 's/^final weights //p'
}
variants=("" ATEN_CPU_CAPABILITY=default ATEN_CPU_CAPABILITY=avx2 ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=Prescott
    OPENBLAS_CORETYPE=Sandybridge OPENBLAS_CORETYPE=Haswell OPENBLAS_CORETYPE=Zen OPENBLAS_CORETYPE=SkylakeX)
for mode in portable fast; do
    job "$mode" 1 > "$work/$mode.json"
    : > "$work/$mode.hashes"
    for v in "${variants[@]}"; do
        h=$(hash_of "$work/$mode.json" $v)
        echo "$mode ${v:-as-detected}: $h"
        echo "$h" >> "$work/$mode.hashes"
    done
done
# The portable kernels' own SIMD choices (compute/portable/matmul.h): each CPU picks its widest.
for isa in generic avx2; do
    h=$(hash_of "$work/portable.json" TESSERA_PORTABLE_ISA=$isa)
    echo "portable TESSERA_PORTABLE_ISA=$isa: $h"
    echo "$h" >> "$work/portable.hashes"
done
for threads in 2 4; do
    job portable "$threads" > "$work/portable-$threads.json"
    h=$(hash_of "$work/portable-$threads.json")
    echo "portable threads=$threads: $h"
    echo "$h" >> "$work/portable.hashes"
done
portable=$(sort -u "$work/portable.hashes" | grep -c .)
fast=$(sort -u "$work/fast.hashes" | grep -c .)
echo "distinct final weights: portable $portable of 13 runs, fast $fast of 9"
[ "$portable" -eq 1 ] || { echo "variants: portable mode is not portable" >&2; exit 1; }
[ "$fast" -ge 2 ] || { echo "variants: fast mode gave one hash: the variants changed nothing, so nothing was shown" >&2; exit 1; }
