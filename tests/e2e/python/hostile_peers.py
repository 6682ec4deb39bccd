"""Hostile peers, written from docs/PROTOCOL.md alone, against a real broker on which an honest
node trains a job (tests/e2e/tst_hostile.cpp starts them). Each attack of docs/SECURITY.md,
"Hostile peers", is tried and must fail; a prober asks LIST and STATUS all along and reports how
long the broker took to answer (the test asserts that it answered, never how fast).

Usage: hostile_peers.py ENDPOINT JOB_ID (prints "ready for the honest node" when the test should
start it)
Prints one line per attack; the last line is "prober: N answers, slowest X ms".
"""
import hashlib
import io
import json
import sys
import threading
import time
from typing import Tuple

import torch
import zmq

endpoint, job_id = sys.argv[1], sys.argv[2]
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
            "maxThreads": 1, "capabilities": ["int8", "portable", "optimizer-state"]}
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
# No other node is there yet (the test starts the honest node when this script says so), so what
# the hoarder gets does not depend on how fast anything runs.
hoarder = connect()
answer, welcome = exchange(hoarder, REGISTER, {"node": node_info("hoarder", benchmarkSamplesPerSecond=2.5e-8)})
assert answer == WELCOME, welcome


def ask(node):
    """READY; the TASK it brings, or None when the broker has nothing for it now."""
    pending = []
    answer, reply = reply_to(node, NODES, {"limit": 1}, pending)  # a request answered after any TASK
    if pending:
        return pending[0]
    send(node, READY, {})
    answer, reply = reply_to(node, NODES, {"limit": 1}, pending)
    return pending[0] if pending else None


tasks = []
for _ in range(10):
    task = ask(hoarder)
    if task is not None:
        tasks.append(task)
# It never answers: it holds 2 shards of round 0, each due within the broker's ceiling however slow
# it claims to be.
assert len(tasks) == 2 and all(task["task"]["round"] == 0 for task in tasks), tasks
longest = max(task["deadlineMs"] for task in tasks)
assert longest <= 3600 * 1000, longest
print("1. capture: the hoarder asked 10 times and holds %d shards, due within %d s" % (len(tasks), longest // 1000))

# --- 2. one node fails anyone's job ------------------------------------------------------------
# The hoarder reports what it holds as failed, and asks again: no other node could run them, so
# the broker runs each itself (and its result answers the shard); a node whose failure the broker
# disproved gets nothing more of the job, and the job does not fail.
failed = set()
while tasks:
    task = tasks.pop(0)
    shard = task["task"]["shard"]
    assert shard not in failed, "the broker gave back shard %d to the node that failed it" % shard
    failed.add(shard)
    result = {"jobId": task["task"]["jobId"], "round": 0, "shard": shard, "outcome": "failed",
              "failure": "CUDA error (made up)"}
    answer, reply = reply_to(hoarder, RESULT, {"assignment": task["assignment"], "result": result}, tasks)
    assert answer == OK and reply.get("verdict") == "failed", reply
    if not tasks:
        task = ask(hoarder)
        if task is not None:
            tasks.append(task)
assert len(failed) == 2, failed
assert ask(hoarder) is None, "the broker gave more of the job to a node whose failures it disproved"
answer, status = reply_to(hoarder, STATUS, {"jobId": job_id}, [])
assert answer == OK and status["job"]["state"] == "running", status
print("2. false failures: 2 shards reported failed, trained by the broker, then no more work; the job is %s"
      % status["job"]["state"])

# The honest node now joins (the test starts it) and finishes the job despite all this.
print("ready for the honest node", flush=True)
deadline = time.monotonic() + 300
honest_node = None
while honest_node is None:
    assert time.monotonic() < deadline, "the honest node never registered"
    answer, listed = reply_to(hoarder, NODES, {}, [])
    honest_node = next((n["nodeId"] for n in listed["nodes"] if n["name"] == "node-1" and n["online"]), None)
    time.sleep(0.2)

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

# --- 4. a TorchScript model whose loading never ends ------------------------------------------------
# Its __setstate__ (run by torch.jit.load itself) counts for ever. It is uploaded and quoted: the
# quote must come from the archive's directory, so it is answered at all, with a price.
class LoadsForever(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(10, 784))

    def forward(self, x):
        return torch.nn.functional.linear(x.flatten(1), self.weight)

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]):
        n = 0
        while n >= 0:
            n += 1
        self.weight = state[0]
        self.training = state[1]


buffer = io.BytesIO()
torch.jit.save(torch.jit.script(LoadsForever()), buffer)
script = buffer.getvalue()
script_digest = hashlib.sha256(script).hexdigest()
answer, reply = exchange(client, PUT, {"sha256": script_digest, "offset": 0, "size": len(script)}, script)
assert answer == OK and reply["complete"], reply
endless = dict(huge, name="endless", model={"torchscript": {"sha256": script_digest}})
started = time.monotonic()
answer, quoted = exchange(client, QUOTE, {"job": endless})
assert answer == OK and quoted["quote"]["total"], quoted
print("4. a model that loads for ever: QUOTE answered in %d ms without loading it (total %s)"
      % ((time.monotonic() - started) * 1000, quoted["quote"]["total"]))

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
