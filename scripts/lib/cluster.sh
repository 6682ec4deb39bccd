# A broker and nodes on this machine, over real ZeroMQ on 127.0.0.1: one launcher for make demo,
# make chaos, the disk-full test and make bench (the C++ e2e tests' Cluster, tests/e2e/tst_network.cpp,
# keeps the same rules). Source it from bash:
#
#   . scripts/lib/cluster.sh
#   cluster_init BIN_DIR WORK_DIR     # the folder of tessera-broker/-node/-job, and where data and logs go
#   cluster_broker [SETTINGS]         # start the broker and wait until it answers
#   cluster_node NAME [ARGS...]       # start a node called NAME (extra `tessera-node run` arguments;
#                                     # CLUSTER_NODE_SETTINGS: more lines for its settings file)
#   cluster_job ARGS...               # tessera-job as the cluster's job owner, on this broker
#   cluster_kill NAME                 # SIGKILL one process and wait until it is gone
#   cluster_start NAME                # start it again: same data folder, same port, same log
#   cluster_stop                      # stop exactly what was started (SIGTERM, then SIGKILL after 10 s)
#   cluster_demo BIN_DIR NAME JOB     # make demo's start: a broker and two nodes in a new folder
#                                     # ${TMPDIR:-/tmp}/NAME.XXXXXX, stopped on exit; JOB submitted,
#                                     # its id in CLUSTER_JOB_ID
#
# The rules, here and in the C++ Cluster: the broker gets a free port below the kernel's ephemeral
# range (scripts/free_port.py) and a settings file `[Broker] DataDirectory=WORK/broker, Faucet=true`
# plus SETTINGS (lines of Key=Value); it counts as started once `tessera-job list` answers (at most
# 120 s, and the launcher stops at once if it dies). Each node gets `[Node] DataDirectory=WORK/NAME,
# Name=NAME` and `[Compute] BenchmarkOnFirstStart=false` (a new node would measure its CPU for
# about 2 s before registering, inside what the scripts time). Every process appends to WORK/NAME.log (the broker's name is `broker`). The job owner's
# identity is WORK/owner.key. Only processes this launcher started are ever signalled.

CLUSTER_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
declare -gA CLUSTER_PIDS=()
declare -gA CLUSTER_ARGS=()

cluster_init() {
    CLUSTER_BIN=$(cd "$1" && pwd)
    CLUSTER_DIR=$2
    mkdir -p "$CLUSTER_DIR"
    CLUSTER_PORT=$(/usr/bin/python3 "$CLUSTER_LIB_DIR/../free_port.py")
    CLUSTER_ENDPOINT="tcp://127.0.0.1:$CLUSTER_PORT"
    CLUSTER_PIDS=()
    CLUSTER_ARGS=()
}

cluster_job() {
    "$CLUSTER_BIN/tessera-job" --config /dev/null --identity "$CLUSTER_DIR/owner.key" --broker "$CLUSTER_ENDPOINT" "$@"
}

cluster_log_tail() {
    echo "--- $CLUSTER_DIR/$1.log" >&2
    tail -20 "$CLUSTER_DIR/$1.log" >&2 || true
}

# Starts NAME as recorded by cluster_broker or cluster_node, in the background, appending to its log.
cluster_start() {
    local name=$1
    if [ "$name" = broker ]; then
        "$CLUSTER_BIN/tessera-broker" --config "$CLUSTER_DIR/broker.ini" --bind "$CLUSTER_ENDPOINT" \
            >>"$CLUSTER_DIR/broker.log" 2>&1 &
        CLUSTER_PIDS[broker]=$!
        disown "$!" # no "Killed" notes from bash: cluster_kill and cluster_stop wait for it
        cluster_wait_for_broker
    else
        # shellcheck disable=SC2086 # the recorded extra arguments are words
        "$CLUSTER_BIN/tessera-node" --config "$CLUSTER_DIR/$name.ini" run --broker "$CLUSTER_ENDPOINT" ${CLUSTER_ARGS[$name]} \
            >>"$CLUSTER_DIR/$name.log" 2>&1 &
        CLUSTER_PIDS[$name]=$!
        disown "$!"
    fi
}

# Waits until the broker answers; stops the caller if it died or stays silent for 120 s.
cluster_wait_for_broker() {
    local deadline=$((SECONDS + 120))
    until cluster_job list >/dev/null 2>&1; do
        if ! kill -0 "${CLUSTER_PIDS[broker]}" 2>/dev/null; then
            echo "cluster: the broker died" >&2
            cluster_log_tail broker
            return 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "cluster: the broker did not answer for 120 s" >&2
            cluster_log_tail broker
            return 1
        fi
        sleep 0.2
    done
}

cluster_broker() {
    printf '[Broker]\nDataDirectory=%s/broker\nFaucet=true\n%s\n' "$CLUSTER_DIR" "${1:-}" >"$CLUSTER_DIR/broker.ini"
    cluster_start broker
}

cluster_node() {
    local name=$1
    shift
    printf '[Node]\nDataDirectory=%s/%s\nName=%s\n[Compute]\nBenchmarkOnFirstStart=false\n%b\n' "$CLUSTER_DIR" "$name" "$name" \
        "${CLUSTER_NODE_SETTINGS:-}" >"$CLUSTER_DIR/$name.ini"
    CLUSTER_ARGS[$name]="$*"
    cluster_start "$name"
}

# Waits until the node's log says it registered (at most 120 s).
cluster_wait_registered() {
    local name=$1 deadline=$((SECONDS + 120))
    until grep -q "registered with" "$CLUSTER_DIR/$name.log" 2>/dev/null; do
        if ! kill -0 "${CLUSTER_PIDS[$name]}" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            echo "cluster: $name did not register" >&2
            cluster_log_tail "$name"
            return 1
        fi
        sleep 0.2
    done
}

cluster_kill() {
    local pid=${CLUSTER_PIDS[$1]:-}
    [ -n "$pid" ] || return 0
    kill -9 "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

cluster_stop() {
    local name pid deadline
    for pid in "${CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    deadline=$((SECONDS + 10))
    for name in "${!CLUSTER_PIDS[@]}"; do
        pid=${CLUSTER_PIDS[$name]}
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    done
    CLUSTER_PIDS=()
}

# A field of the one JSON document on stdin: cluster_field state < status.json
cluster_field() {
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

cluster_demo() {
    cluster_init "$1" "$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX")"
    trap cluster_stop EXIT INT TERM
    # A local broker: its faucet funds the job owner and bonds the nodes' stake.
    cluster_broker
    for n in 1 2; do cluster_node "demo-node-$n"; done
    echo "Broker at $CLUSTER_ENDPOINT and two nodes started (logs in $CLUSTER_DIR)"
    CLUSTER_JOB_ID=$(cluster_job submit "$3")
    echo "Submitted $3 as job $CLUSTER_JOB_ID"
}
