#!/bin/sh
# make bench: the desktop app's cost when it sits idle in the tray. Prints cold start to the event
# loop (tray up), resident memory and CPU use over 10 s of idling (not contributing), each with a
# baseline measured in the same run: the start of `tessera --version` (the same binary and
# libraries without the app) and of `tessera-compute` (a process that loads LibTorch and quits: what
# the app no longer pays), and the goals (0.3 s, 100 MB, 0.5% of a core). The practice broker, a
# child process with LibTorch, is measured beside it.
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
torch=999999999999
for _ in 1 2 3; do
    t0=$(now); "$build/app/tessera-compute" >/dev/null 2>&1 || true; t1=$(now)
    [ $((t1 - t0)) -lt "$torch" ] && torch=$((t1 - t0))
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
children=0
for child in $(cat /proc/$pid/task/*/children 2>/dev/null); do
    children=$((children + $(awk '/VmRSS/ { print $2 }' "/proc/$child/status" 2>/dev/null || echo 0)))
done
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
c0=$(ticks); sleep 10; c1=$(ticks)
hz=$(getconf CLK_TCK)
awk -v start="$start" -v base="$base" -v torch="$torch" -v rss="$rss" -v children="$children" -v c0="$c0" -v c1="$c1" -v hz="$hz" 'BEGIN {
    s = start / 1e9; b = base / 1e9; t = torch / 1e9; mb = rss / 1024; kids = children / 1024; cpu = (c1 - c0) / hz / 10 * 100;
    printf "app: cold start to the tray %.2f s (tessera --version %.2f s: ratio %.2f; LibTorch alone, tessera-compute: %.2f s; goal 0.3 s: %s)\n", s, b, s / b, t, s <= 0.3 ? "met" : "NOT met";
    printf "app: idle resident memory %.0f MB (goal 100 MB: ratio %.2f, %s); its practice broker (a child, with LibTorch) %.0f MB\n", mb, mb / 100, mb <= 100 ? "met" : "NOT met", kids;
    printf "app: idle CPU %.2f%% of a core over 10 s (goal 0.5%%: %s)\n", cpu, cpu < 0.5 ? "met" : "NOT met";
    if (ENVIRON["TESSERA_BENCH_RECORD"] != "") {
        out = ENVIRON["TESSERA_BENCH_RECORD"];
        printf "app.start %.6f\napp.versionStart %.6f\napp.torchStart %.6f\napp.rssMB %.3f\napp.brokerRssMB %.3f\napp.cpuPercent %.4f\n", s, b, t, mb, kids, cpu >> out;
    }
}'
