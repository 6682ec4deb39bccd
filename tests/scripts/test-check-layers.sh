#!/usr/bin/env bash
# Plants one violation of each rule in a scratch tree and expects check-layers.sh to fail on it,
# then checks that a clean tree passes.
set -euo pipefail
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

make_tree() {
    rm -rf "$scratch/tree"
    mkdir -p "$scratch/tree"/{core,app/desktop,compute/engine,compute/supervisor/sandbox,compute/common,net,swarm,ui,app}
    printf '#include <QString>\n' > "$scratch/tree/core/a.h"
    printf '#include <torch/torch.h>\n' > "$scratch/tree/compute/engine/a.cpp"
    printf '#include <compute/common/types.h>\n#include <compute/supervisor/inthread.h>\n' > "$scratch/tree/compute/engine/b.cpp"
    printf '#include <compute/common/types.h>\n' > "$scratch/tree/compute/supervisor/a.cpp"
    printf '#include <QString>\n' > "$scratch/tree/compute/supervisor/sandbox/a.h"
    printf '#include <compute/supervisor/computethread.h>\n' > "$scratch/tree/app/desktop/a.cpp"
    printf '#include <zmq.hpp>\n' > "$scratch/tree/net/a.cpp"
    printf '#include <libtorrent/session.hpp>\n#include <core/hash.h>\n' > "$scratch/tree/swarm/a.cpp"
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
plant compute/engine/a.cpp '#include "zmq.h"'
plant compute/supervisor/a.cpp '#include <torch/script.h>'
plant compute/supervisor/sandbox/a.h '#include <ATen/Tensor.h>'
plant compute/common/types.h '#include <c10/core/Device.h>'
plant compute/supervisor/a.cpp '#include <compute/engine/shardrun.h>'
plant compute/supervisor/sandbox/a.h '#include "../../engine/weights.h"'
plant compute/common/types.h '#include "engine/benchmark.h"'
plant core/a.h '#include <QtWidgets/QWidget>'
plant net/a.cpp '#include <QChart>'
plant core/a.h '#include <net/transportinfo.h>'
plant compute/engine/a.cpp '#include <ui/formatting.h>'
plant ui/a.cpp '#include <compute/engine/runtimeprofile.h>'
plant app/desktop/a.cpp '#include <compute/engine/shardrun.h>'
plant net/a.cpp '#include <libtorrent/torrent_info.hpp>'
plant app/main.cpp '#include "libtorrent/session.hpp"'
plant swarm/a.cpp '#include <net/messages.h>'
plant swarm/a.cpp '#include <zmq.hpp>'
plant core/a.h '#include <swarm/swarm.h>'
# An include loop inside a folder: computethread.h's type used by worker.h, which it includes.
make_tree
printf '#include "b.h"\n' > "$scratch/tree/compute/supervisor/a.h"
printf '#include <compute/supervisor/a.h>\n' > "$scratch/tree/compute/supervisor/b.h"
if "$checker" "$scratch/tree" >/dev/null 2>&1; then
    echo "FAIL: an include loop in compute/supervisor/ was not caught"
    exit 1
fi
echo "caught: an include loop in compute/supervisor/"
echo "check-layers catches every planted violation"
