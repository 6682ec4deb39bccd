"""Another account on the broker's machine tries to reach it (run as that account, e.g. nobody):
a LIST over the broker's ipc:// socket. Prints "no answer" (and exits 0) when it gets none within
10 s: the socket's folder is closed to it; exits 1 if the broker answered.

Usage: local_account.py ipc:///PATH/broker.sock
"""
import json
import os
import sys

import zmq

endpoint = sys.argv[1]
print("uid %d trying %s" % (os.getuid(), endpoint))
socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.RCVTIMEO, 10000)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(endpoint)
socket.send_multipart([b"TESSERA/1", b"\x22", json.dumps({"id": 1}).encode()])
try:
    reply = socket.recv_multipart()
except zmq.Again:
    print("no answer: the broker is out of this account's reach")
    sys.exit(0)
print("answered:", reply[1:3])
sys.exit(1)
