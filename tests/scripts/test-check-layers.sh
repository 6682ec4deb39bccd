#!/usr/bin/env bash
# Plants one violation of each rule in a scratch tree and expects check-layers.sh to fail on it,
# then checks that a clean tree passes.
set -euo pipefail
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

make_tree() {
    rm -rf "$scratch/tree"
    mkdir -p "$scratch/tree"/{core,compute,net,ui,app}
    printf '#include <QString>\n' > "$scratch/tree/core/a.h"
    printf '#include <torch/torch.h>\n' > "$scratch/tree/compute/a.cpp"
    printf '#include <zmq.hpp>\n' > "$scratch/tree/net/a.cpp"
    printf '#include <QWidget>\n' > "$scratch/tree/ui/a.cpp"
    printf '#include <QApplication>\n#include <compute/a.h>\n' > "$scratch/tree/app/main.cpp"
}

make_tree
"$checker" "$scratch/tree" >/dev/null || { echo "FAIL: a clean tree was rejected"; exit 1; }

plant() {
    local file=$1 line=$2
    make_tree
    printf '%s\n' "$line" >> "$scratch/tree/$file"
    if "$checker" "$scratch/tree" >/dev/null 2>&1; then
        echo "FAIL: '$line' in $file was not caught"
        exit 1
    fi
    echo "caught: '$line' in $file"
}

plant core/a.h '#include <torch/torch.h>'
plant ui/a.cpp '#include <ATen/core/Tensor.h>'
plant app/main.cpp '#  include <c10/util/Half.h>'
plant core/a.h '#include <zmq.hpp>'
plant compute/a.cpp '#include "zmq.h"'
plant core/a.h '#include <QtWidgets/QWidget>'
plant net/a.cpp '#include <QChart>'
plant core/a.h '#include <net/transportinfo.h>'
plant compute/a.cpp '#include <ui/formatting.h>'
plant ui/a.cpp '#include <compute/runtimeprofile.h>'
echo "check-layers catches every planted violation"
