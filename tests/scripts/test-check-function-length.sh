#!/usr/bin/env bash
# A function of 81 lines in a scratch tree fails check-function-length.sh; one of 80 passes, and so
# does an interpreter named in its list.
set -euo pipefail
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch"/{compute,app,core}

function_of() { # NAME LINES: a function LINES long, signature to closing brace
    local name=$1 lines=$2
    echo "int $name(int x)"
    echo "{"
    for ((i = 0; i < lines - 4; ++i)); do echo "    x += $i;"; done
    echo "    return x;"
    echo "}"
}

function_of fits 80 > "$scratch/core/a.cpp"
"$checker" "$scratch" >/dev/null || { echo "FAIL: a function of 80 lines was rejected"; exit 1; }
function_of tooLong 81 > "$scratch/app/b.cpp"
if "$checker" "$scratch" >/dev/null 2>&1; then
    echo "FAIL: a function of 81 lines was not caught"
    exit 1
fi
echo "caught: a function of 81 lines in app/"
rm "$scratch/app/b.cpp"
{ echo "namespace tessera::compute::portable {"; echo "struct Executor { int run(int x); };"
  function_of Executor::run 120; echo "}"; } > "$scratch/compute/program.cpp"
"$checker" "$scratch" >/dev/null || { echo "FAIL: an allowed interpreter was rejected"; exit 1; }
echo "check-function-length catches a long function and lets the interpreters be"
