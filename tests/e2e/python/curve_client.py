"""Connects to a CURVE broker three ways: plaintext, with a wrong server key, with the right one.
Only the last may get an answer.

Usage: curve_client.py ENDPOINT SERVER_KEY
"""
import json
import sys

import zmq

endpoint, server_key = sys.argv[1], sys.argv[2]
context = zmq.Context()


def try_list(server, timeout_ms=2500):
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
    socket.setsockopt(zmq.LINGER, 0)
    if server is not None:
        public, secret = zmq.curve_keypair()
        socket.curve_serverkey = server.encode()
        socket.curve_publickey = public
        socket.curve_secretkey = secret
    socket.connect(endpoint)
    socket.send_multipart([b"TESSERA/1", b"\x22", json.dumps({"id": 1}).encode()])
    try:
        reply = socket.recv_multipart()
        return json.loads(reply[2])
    except zmq.Again:
        return None
    finally:
        socket.close()


wrong_key = zmq.curve_keypair()[0].decode()
assert try_list(None) is None, "a plaintext client got an answer"
print("plaintext client: no connection")
assert try_list(wrong_key) is None, "a client with the wrong server key got an answer"
print("wrong server key: no connection")
# The right key: answered, even when a loaded machine (make test runs two suites at once, one of
# them the chaos run) makes the broker slow to start.
answer = None
for _ in range(8):
    answer = try_list(server_key, 5000)
    if answer is not None:
        break
assert answer is not None and answer["id"] == 1, answer
print("right server key: answered")
