#!/bin/sh
# make bench: the desktop app's cost when it sits idle in the tray. Prints cold start to the event
# loop (tray up), resident memory and CPU use over 10 s of idling (not contributing), each with a
# baseline measured in the same run: the start of `tessera --version` (the same binary and
# libraries, LibTorch included, without the app), and the goals (1 s, 200 MB, 0.5% of a core).
# Usage: bench/appbench.sh BUILD_DIR
set -eu
build=${1:-build}
app="$build/app/tessera"
scratch=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$scratch"' EXIT
printf '[Node]\nDataDirectory=%s/node\n[App]\nNotifications=false\n' "$scratch" > "$scratch/tessera.ini"
export QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$scratch" XDG_CONFIG_HOME="$scratch/config"

now() { date +%s%N; }
# The libraries alone: best of 3.
base=999999999999
for _ in 1 2 3; do
    t0=$(now); "$app" --version >/dev/null 2>&1; t1=$(now)
    [ $((t1 - t0)) -lt "$base" ] && base=$((t1 - t0))
done
# The app: from exec to "tessera: ready" (a first run: not contributing).
t0=$(now)
"$app" --config "$scratch/tessera.ini" 2>"$scratch/err" &
pid=$!
while ! grep -q "tessera: ready" "$scratch/err" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$scratch/err"; exit 1; }
    sleep 0.01
done
t1=$(now)
start=$((t1 - t0))
sleep 5
rss=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
c0=$(ticks); sleep 10; c1=$(ticks)
hz=$(getconf CLK_TCK)
awk -v start="$start" -v base="$base" -v rss="$rss" -v c0="$c0" -v c1="$c1" -v hz="$hz" 'BEGIN {
    s = start / 1e9; b = base / 1e9; mb = rss / 1024; cpu = (c1 - c0) / hz / 10 * 100;
    printf "app: cold start to the tray %.2f s (tessera --version %.2f s: ratio %.2f; goal 1 s: %s)\n", s, b, s / b, s < 1 ? "met" : "NOT met";
    printf "app: idle resident memory %.0f MB (goal 200 MB: ratio %.2f, %s)\n", mb, mb / 200, mb < 200 ? "met" : "NOT met";
    printf "app: idle CPU %.2f%% of a core over 10 s (goal 0.5%%: %s)\n", cpu, cpu < 0.5 ? "met" : "NOT met";
    if (ENVIRON["TESSERA_BENCH_RECORD"] != "") {
        out = ENVIRON["TESSERA_BENCH_RECORD"];
        printf "app.start %.6f\napp.versionStart %.6f\napp.rssMB %.3f\napp.cpuPercent %.4f\n", s, b, mb, cpu >> out;
    }
}'
