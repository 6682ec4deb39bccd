#!/usr/bin/env bash
# Fails when a layer includes what only another layer may include (../shared/ARCHITECTURE.md):
#   torch (<torch/...>, <ATen/...>, <c10/...>) only in compute/ (and its tests and benchmarks),
#   ZeroMQ (<zmq.h>, <zmq.hpp>, <zmq_addon.hpp>) only in net/,
#   Qt Widgets and Charts only in ui/ and app/,
#   and core/ includes nothing of compute/, net/, ui/ or app/.
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
ours='^\s*#\s*include\s*[<"](compute|net|ui|app)/'

check "torch may be included only in compute/" "$torch" core net ui app
check "ZeroMQ may be included only in net/" "$zmq" core compute ui app
check "Qt Widgets and Charts may be included only in ui/ and app/" "$widgets" core compute net
check "core/ depends on nothing of Tessera's" "$ours" core
check "compute/ may not include net/ or ui/" '^\s*#\s*include\s*[<"](net|ui|app)/' compute
check "net/ may not include compute/ or ui/" '^\s*#\s*include\s*[<"](compute|ui|app)/' net
check "ui/ may not include compute/ or net/" '^\s*#\s*include\s*[<"](compute|net|app)/' ui

if [ "$failures" -gt 0 ]; then
    echo "check-layers: $failures rule(s) broken"
    exit 1
fi
echo "check-layers: layering holds"
