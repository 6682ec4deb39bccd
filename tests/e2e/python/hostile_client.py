"""A hostile client, written from docs/PROTOCOL.md alone: sends the broker what it must refuse and
checks each answer, then checks that the broker still serves and stored nothing.

Usage: hostile_client.py ENDPOINT
"""
import hashlib
import json
import sys

import zmq

from flooding import flood_until_dropped

endpoint = sys.argv[1]
context = zmq.Context()
socket = context.socket(zmq.DEALER)
socket.setsockopt(zmq.RCVTIMEO, 10000)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(endpoint)


def exchange(frames):
    socket.send_multipart(frames)
    reply = socket.recv_multipart()
    assert reply[0] == b"TESSERA/1", reply
    return reply[1], json.loads(reply[2])


def expect_error(frames, code):
    command, header = exchange(frames)
    assert command == b"\x08", (command, header)
    assert header["code"] == code, (code, header)
    print("refused as %s: %s" % (code, header["message"]))


def request(command, header):
    return [b"TESSERA/1", bytes([command]), json.dumps(header).encode()]


expect_error([b"garbage"], "bad-message")
expect_error([b"TESSERA/2", b"\x22", b"{}"], "bad-version")
expect_error([b"TESSERA/1", b"\x7e", b"{}"], "unknown-command")
expect_error([b"TESSERA/1", b"\x22", b"{not json"], "bad-message")
expect_error([b"TESSERA/1", b"\x12", b"{}", b"x" * (3 * 1024 * 1024)], "too-large")
expect_error(request(0x21, {"jobId": "no-such-job"}), "unknown-job")
expect_error(request(0x23, {"jobId": "no-such-job"}), "unknown-job")
expect_error(request(0x20, {"job": {"name": "x"}}), "invalid")
expect_error(request(0x04, {}), "not-registered")
expect_error(request(0x06, {"assignment": "a", "result": {}}), "not-registered")

# A blob whose bytes do not match its name is refused and not kept.
claimed = hashlib.sha256(b"the real bytes").hexdigest()
socket.send_multipart(request(0x12, {"sha256": claimed, "offset": 0, "size": 9}) + [b"bad bytes"])
command, header = socket.recv_multipart()[1:3]
assert command == b"\x08" and json.loads(header)["code"] == "hash-mismatch", (command, header)
expect_error(request(0x10, {"sha256": claimed, "offset": 0, "length": 9}), "unknown-blob")

# Ids and names that look like format strings are data: a node registers as "pct%1%2%3node" named
# "name %1 %2" (plaintext ids are claims), and `tessera-job nodes` must show them as they are.
registrar = context.socket(zmq.DEALER)
registrar.setsockopt(zmq.RCVTIMEO, 10000)
registrar.setsockopt(zmq.LINGER, 0)
registrar.connect(endpoint)
registrar.send_multipart(request(0x01, {"node": {"nodeId": "pct%1%2%3node", "name": "name %1 %2", "softwareVersion": "x",
                                                 "runtimeProfile": "p", "devices": [], "maxThreads": 1}}))
reply = registrar.recv_multipart()
assert reply[1] == b"\x02", reply
registrar.close()
print("a node named with format characters registered")

# A flood: far more than the broker's 500 messages a second are refused as too-many-requests
# (and the rest answered), without hurting anyone else.
flood = context.socket(zmq.DEALER)
flood.setsockopt(zmq.RCVTIMEO, 3000)
flood.setsockopt(zmq.LINGER, 0)
flood.setsockopt(zmq.SNDHWM, 100000)
flood.setsockopt(zmq.RCVHWM, 100000)
flood.connect(endpoint)
for i in range(3000):
    flood.send_multipart(request(0x22, {"id": i}))
refused = answered = 0
try:
    while refused + answered < 3000:
        reply = flood.recv_multipart()
        if reply[1] == b"\x08" and json.loads(reply[2])["code"] == "too-many-requests":
            refused += 1
        else:
            answered += 1
except zmq.Again:
    pass
flood.close()
assert refused > 0 and answered > 0, (refused, answered)
print("a flood of 3000: %d answered, %d refused as too-many-requests" % (answered, refused))

# A peer that keeps flooding for more than 5 s is dropped: its later messages go unanswered, even
# a polite one, while a new connection is served. The flood goes on until the broker falls silent
# (3 s without a single answer, refusals included), so a slow or loaded broker only makes it longer.
flood = context.socket(zmq.DEALER)
flood.setsockopt(zmq.LINGER, 0)
flood.setsockopt(zmq.SNDHWM, 0)
flood.setsockopt(zmq.RCVHWM, 0)
flood.connect(endpoint)
sent, flood_seconds = flood_until_dropped(flood)
flood.send_multipart(request(0x22, {"id": "polite"}))
heard = [json.loads(frames[2]).get("id") for frames in iter(lambda: flood.recv_multipart() if flood.poll(2000) else None, None)]
assert "polite" not in heard, heard
flood.close()
print("a flood of %d messages in %.1f s: the peer was dropped (a polite request after it went unanswered)"
      % (sent, flood_seconds))

# ... and the broker goes on serving.
command, header = exchange(request(0x22, {"id": 42}))
assert command == b"\x07" and header["id"] == 42, (command, header)
print("the broker still serves")
