"""Hostile peers, written from docs/PROTOCOL.md alone, against a real broker on which an honest
node trains a job (tests/e2e/tst_hostile.cpp starts them). Each attack of docs/SECURITY.md,
"Hostile peers", is tried and must fail; a prober asks LIST and STATUS all along and reports how
long the broker took to answer (the test asserts that it answered, never how fast).

Usage: hostile_peers.py ENDPOINT JOB_ID HONEST_NODE_ID
Prints one line per attack; the last line is "prober: N answers, slowest X ms".
"""
import hashlib
import json
import sys
import threading
import time

import zmq

endpoint, job_id, honest_node = sys.argv[1], sys.argv[2], sys.argv[3]
context = zmq.Context()

REGISTER, WELCOME, HEARTBEAT, READY, TASK, RESULT, OK, ERROR = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08
PUT, STATUS, LIST, QUOTE, NODES = 0x12, 0x21, 0x22, 0x24, 0x28


def connect(timeout_ms=20000):
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def send(socket, command, header, payload=None):
    frames = [b"TESSERA/1", bytes([command]), json.dumps(header).encode()]
    if payload is not None:
        frames.append(payload)
    socket.send_multipart(frames)


def receive(socket, timeout=20.0):
    """The next message that is not a HEARTBEAT, within `timeout` seconds (else zmq.Again); each
    heartbeat is answered, as a node keeps its session."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not socket.poll(int(left * 1000)):
            raise zmq.Again()
        frames = socket.recv_multipart()
        assert frames[0] == b"TESSERA/1", frames
        command = frames[1][0]
        if command == HEARTBEAT:
            send(socket, HEARTBEAT, {})
            continue
        return command, json.loads(frames[2])


def exchange(socket, command, header, payload=None):
    send(socket, command, header, payload)
    return receive(socket)


def reply_to(socket, command, header, pending):
    """Sends a request and returns its answer; a TASK that arrives first is kept in `pending`."""
    send(socket, command, header)
    while True:
        answer, reply = receive(socket)
        if answer != TASK:
            return answer, reply
        pending.append(reply)


def expect_error(socket, command, header, code, payload=None):
    answer, reply = exchange(socket, command, header, payload)
    assert answer == ERROR, (answer, reply)
    assert reply["code"] == code, (code, reply)
    return reply["message"]


def node_info(node_id, **extra):
    info = {"nodeId": node_id, "name": node_id, "softwareVersion": "hostile", "runtimeProfile": "p", "devices": [],
            "maxThreads": 1}
    info.update(extra)
    return info


# --- the prober: an ordinary client, asking all along ------------------------------------------
probing = threading.Event()
probing.set()
latencies = []
prober_errors = []


def probe():
    socket = connect(timeout_ms=60000)
    while probing.is_set():
        for command, header in ((LIST, {}), (STATUS, {"jobId": job_id})):
            started = time.monotonic()
            try:
                send(socket, command, header)
                answer, reply = receive(socket, timeout=60.0)
            except zmq.Again:
                prober_errors.append("no answer to %#x within 60 s" % command)
                return
            latencies.append(time.monotonic() - started)
            if answer != OK:
                prober_errors.append("%#x answered %s" % (command, reply))
        time.sleep(0.1)
    socket.close()


prober = threading.Thread(target=probe, daemon=True)
prober.start()

# --- 1. one node holds every shard forever -----------------------------------------------------
hoarder = connect()
answer, welcome = exchange(hoarder, REGISTER, {"node": node_info("hoarder", benchmarkSamplesPerSecond=2.5e-8)})
assert answer == WELCOME, welcome
tasks = []
for _ in range(8):
    send(hoarder, READY, {})
    try:
        command, header = receive(hoarder, timeout=1.0)
    except zmq.Again:
        continue
    if command == TASK:
        tasks.append(header)
# It never answers: it holds at most 2 shards of a round (a new round starts over), each due
# within the broker's ceiling however slow it claims to be.
per_round = {}
for task in tasks:
    per_round[task["task"]["round"]] = per_round.get(task["task"]["round"], 0) + 1
assert tasks and max(per_round.values()) <= 2, "the hoarder got %s shards per round" % per_round
longest = max(task["deadlineMs"] for task in tasks)
assert longest <= 3600 * 1000, longest
print("1. capture: the hoarder asked 8 times and got %s shards per round, due within %d s"
      % (per_round, longest // 1000))
tasks = tasks[-2:]  # what it holds now

# --- 2. one node fails anyone's job ------------------------------------------------------------
# The hoarder reports what it holds as failed, and goes on asking: it never gets a shard it failed
# back in that round, and the job does not fail.
failed = set()
reports = 0
deadline = time.monotonic() + 30
while reports < 4 and time.monotonic() < deadline:
    while tasks:
        task = tasks.pop(0)
        shard = (task["task"]["round"], task["task"]["shard"])
        assert shard not in failed, "the broker gave back shard %s to the node that failed it" % (shard,)
        failed.add(shard)
        result = {"jobId": task["task"]["jobId"], "round": shard[0], "shard": shard[1], "outcome": "failed",
                  "failure": "CUDA error (made up)"}
        answer, reply = reply_to(hoarder, RESULT, {"assignment": task["assignment"], "result": result}, tasks)
        # A shard of a round that ended meanwhile is stale; any other is recorded as failed.
        assert (answer == OK and reply.get("verdict") == "failed") or (answer == ERROR and reply["code"] == "stale"), reply
        reports += 1 if answer == OK else 0
    send(hoarder, READY, {})
    try:
        command, header = receive(hoarder, timeout=2.0)
        if command == TASK:
            tasks.append(header)
    except zmq.Again:
        pass
answer, status = reply_to(hoarder, STATUS, {"jobId": job_id}, [])
assert answer == OK and status["job"]["state"] == "running" and reports >= 1, (reports, status)
print("2. false failures: %d reported on %d shards, none came back to it, the job is %s"
      % (reports, len(failed), status["job"]["state"]))

# --- 3. a QUOTE that would build 17 GB of weights ------------------------------------------------
client = connect()
huge = {"version": 1, "name": "huge", "model": {"zoo": "mlp", "hidden": [65536, 65536]},
        "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
        "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 1, "batchSize": 1, "threads": 1,
                     "checkpointInterval": 1},
        "budget": "1"}
started = time.monotonic()
message = expect_error(client, QUOTE, {"job": huge}, "invalid")
assert "parameters" in message, message
print("3. huge model: QUOTE refused in %d ms: %s" % ((time.monotonic() - started) * 1000, message))

# --- 5. fields that break lists -------------------------------------------------------------------
long_profile = connect()
message = expect_error(long_profile, REGISTER, {"node": node_info("long", runtimeProfile="x" * 40000)}, "invalid")
long_profile.close()
answer, nodes = exchange(client, NODES, {"limit": 1})
assert answer == OK and len(nodes["nodes"]) == 1 and nodes["total"] >= 2 and nodes["next"] == 1, nodes
print("5. long fields refused (%s); NODES pages: 1 of %d, next at %d" % (message, nodes["total"], nodes["next"]))

# --- 6. an upload blocked by anyone who knows the file's hash -----------------------------------
data = b"the owner's real file " * 1000
digest = hashlib.sha256(data).hexdigest()
squatter = connect()
answer, reply = exchange(squatter, PUT, {"sha256": digest, "offset": 0, "size": 1 << 30}, b"x")
assert answer == OK and not reply["complete"], reply
owner = connect()
answer, reply = exchange(owner, PUT, {"sha256": digest, "offset": 0, "size": len(data)}, data)
assert answer == OK and reply["complete"], reply
print("6. uploads: a stranger's 1-byte half-upload of the same hash changed nothing for the owner")

# --- 8. plaintext node-id takeover -------------------------------------------------------------------
thief = connect()
message = expect_error(thief, REGISTER, {"node": node_info(honest_node, signingKey="A" * 43 + "=")}, "forbidden")
print("8. takeover: REGISTER with the honest node's id and another signing key refused (%s)" % message)

probing.clear()
prober.join()
assert not prober_errors, prober_errors
assert latencies, "the prober got no answer"
print("prober: %d answers, slowest %d ms" % (len(latencies), max(latencies) * 1000))
