#!/usr/bin/env bash
# The portable kernels on another instruction set: tst_portable's training run cross-compiled for
# arm64 (Debian's g++-aarch64-linux-gnu, statically linked, -O2) and run under qemu-user must end
# on the digest recorded on x86-64 in tst_portable.cpp, with 1 and 3 threads.
# Usage: arm64.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1
work=$2
mkdir -p "$work"
recorded=$(sed -n 's/.*RecordedDigest = "\([0-9a-f]\{64\}\)".*/\1/p' "$src/tests/compute/portable/tst_portable.cpp")
[ -n "$recorded" ] || { echo "arm64: no recorded digest in tst_portable.cpp" >&2; exit 1; }
aarch64-linux-gnu-g++ -std=c++20 -O2 -ffp-contract=off -fno-fast-math -fopenmp -static -I"$src" -I"$src/tests/compute/portable" \
    "$src/compute/portable/kernels.cpp" "$src/compute/portable/matmul.cpp" "$src/compute/portable/matmul_generic.cpp" \
    "$src/tests/compute/portable/portable_weights.cpp" -o "$work/portable_weights.arm64"
file "$work/portable_weights.arm64" | grep -q "ARM aarch64" || { echo "arm64: not an arm64 binary" >&2; exit 1; }
for threads in 1 3; do
    got=$(qemu-aarch64 "$work/portable_weights.arm64" "$threads" | sha256sum | cut -d' ' -f1)
    echo "arm64, $threads thread(s): $got"
    [ "$got" = "$recorded" ] || { echo "arm64: expected $recorded" >&2; exit 1; }
done
echo "arm64: the recorded bits of x86-64"
