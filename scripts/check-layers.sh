#!/usr/bin/env bash
# Fails when a layer includes what only another layer may include (../shared/ARCHITECTURE.md):
#   torch (<torch/...>, <ATen/...>, <c10/...>) only in compute/engine/ (and the tests and benchmarks),
#   the rest of compute/ (the supervisor, the shared types, devices, pickle, portable) includes
#   nothing of compute/engine/, nor do app/desktop and app/common: the desktop app links the
#   supervisor and never loads LibTorch,
#   ZeroMQ (<zmq.h>, <zmq.hpp>, <zmq_addon.hpp>) only in net/,
#   libtorrent (<libtorrent/...>) only in swarm/, which includes nothing of Tessera's but core/,
#   Qt Widgets and Charts only in ui/ and app/,
#   core/ includes nothing of compute/, net/, ui/ or app/,
#   and no folder's files include each other in a loop (scripts/include-loops.py).
# Usage: check-layers.sh [ROOT]   (default: the repository this script is in)
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

sources() {
    # C++ sources and headers of the given folders that exist.
    local dirs=()
    for d in "$@"; do [ -d "$d" ] && dirs+=("$d"); done
    [ ${#dirs[@]} -eq 0 ] && return 0
    find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cc' \)
}

failures=0
check() {
    local rule=$1 pattern=$2
    shift 2
    local hits
    hits=$(sources "$@" | sort | xargs -r grep -nE "$pattern" /dev/null || true)
    if [ -n "$hits" ]; then
        echo "check-layers: $rule"
        echo "$hits" | sed 's/^/  /'
        failures=$((failures + 1))
    fi
}

torch='^\s*#\s*include\s*[<"](torch/|ATen/|c10/)'
zmq='^\s*#\s*include\s*[<"](zmq|zmq_addon)\.h(pp)?[>"]'
widgets='^\s*#\s*include\s*[<"](QtWidgets|QtCharts|QWidget|QMainWindow|QDialog|QApplication|QSystemTrayIcon|QChart|QPushButton|QLabel|QTableView)'
ours='^\s*#\s*include\s*[<"](compute|net|ui|app|swarm)/'
libtorrent='^\s*#\s*include\s*[<"]libtorrent/'

torchfree="core net control swarm ui app compute/common compute/supervisor compute/devices compute/pickle compute/portable"
check "torch may be included only in compute/engine/" "$torch" $torchfree
check "only compute/engine/ and the programs may include compute/engine/" \
    '^\s*#\s*include\s*[<"](compute/|(\.\./)*)engine/' compute/common compute/supervisor compute/devices compute/pickle compute/portable
check "the desktop app and what it shares with the node (app/desktop, app/common) never load LibTorch" \
    '^\s*#\s*include\s*[<"]compute/engine/' app/desktop app/common
check "ZeroMQ may be included only in net/" "$zmq" core compute control swarm ui app
check "libtorrent may be included only in swarm/" "$libtorrent" core net compute ui app
check "swarm/ may include nothing of Tessera's but core/" '^\s*#\s*include\s*[<"](compute|net|ui|app)/' swarm
check "control/ may include nothing of Tessera's but core/" '^\s*#\s*include\s*[<"](compute|net|swarm|ui|app)/' control
check "Qt Widgets and Charts may be included only in ui/ and app/" "$widgets" core compute net control
check "core/ depends on nothing of Tessera's" "$ours" core
check "compute/ may not include net/ or ui/" '^\s*#\s*include\s*[<"](net|ui|app)/' compute
check "net/ may not include compute/ or ui/" '^\s*#\s*include\s*[<"](compute|ui|app)/' net
check "ui/ may not include compute/ or net/" '^\s*#\s*include\s*[<"](compute|net|app)/' ui

# No include loops inside a folder (a header and its source count as one): what two files need of
# each other belongs in a third, or in one of them.
if ! loops=$(/usr/bin/python3 "$(dirname "$0")/include-loops.py" . core net control swarm compute ui app); then
    echo "check-layers: a folder's files include each other"
    echo "$loops" | sed 's/^/  /'
    failures=$((failures + 1))
fi

if [ "$failures" -gt 0 ]; then
    echo "check-layers: $failures rule(s) broken"
    exit 1
fi
echo "check-layers: layering holds"
