#!/usr/bin/env bash
# Runs each libFuzzer target in fuzz/ for SECONDS, from the seed corpus in fuzz/corpus/<target>
# (golden messages, the example jobs, the shipped settings), keeping what it finds in
# BUILD/corpus/<target>. A crash stops it with the input saved as BUILD/crash-*; it then belongs in
# fuzz/corpus/<target> and in a regression test. Prints the executions of each target.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=$1
seconds=${2:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
for target in decoder jobspec settings blobchunks modelarchive codedrange manifest inferencelines stageinputs httprequest tensorpickle tensorfile blobtorrent; do
    corpus="$build/corpus/$target"
    mkdir -p "$corpus"
    log="$build/fuzz_$target.log"
    if ! (cd "$build" && "./fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 "corpus/$target" "$src/fuzz/corpus/$target") >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz: $target FAILED (the input is in $build/crash-* or $build/fuzz/crash-*)" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    echo "fuzz: $target: $runs executions in ${seconds} s ($rate/s), no crash; corpus $(ls "$corpus" | wc -l) inputs"
done
