"""Uploads against a real plaintext broker started with Broker/MaxUnnamedUploadMiB=2:

1. One account uploads blobs that no job names: 2 x 1,000,000 bytes fit, a third is refused
   (`upload: ... Broker/MaxUnnamedUploadMiB`); another account's upload still goes through.
2. The broker's database fails under it (its blob_readers table is dropped, here, with Python's
   sqlite3): the upload that completes is refused as `internal`, and the message names none of
   the broker's files.

Usage: uploads.py ENDPOINT BROKER_DATABASE
"""
import hashlib
import json
import os
import sqlite3
import sys

import zmq

endpoint, database = sys.argv[1], sys.argv[2]
socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.RCVTIMEO, 30000)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(endpoint)
next_id = [0]


def put(account, data):
    """One PUT of the whole blob (under 1 MiB) as `account`: (code, answer)."""
    next_id[0] += 1
    header = {"id": next_id[0], "owner": account, "sha256": hashlib.sha256(data).hexdigest(), "offset": 0,
              "size": len(data)}
    socket.send_multipart([b"TESSERA/1", b"\x12", json.dumps(header).encode(), data])
    while True:
        reply = socket.recv_multipart()
        answer = json.loads(reply[2])
        if answer.get("id") != next_id[0]:
            continue
        return ("ok" if reply[1][0] == 0x07 else answer.get("code")), answer


for i in range(2):
    code, answer = put("hoarder", os.urandom(1000000))
    assert code == "ok" and answer["complete"], answer
print("2 unnamed uploads of 1,000,000 bytes: stored")
code, answer = put("hoarder", os.urandom(1000000))
assert code == "invalid" and "MaxUnnamedUploadMiB" in answer["message"], answer
print("the third:", code, answer["message"])
code, answer = put("someone else", os.urandom(1000000))
assert code == "ok" and answer["complete"], answer
print("another account's upload: stored")

with sqlite3.connect(database, timeout=60) as db:
    db.execute("DROP TABLE blob_readers")
code, answer = put("after the damage", os.urandom(1000))
print("with its database failing:", code, answer.get("message"))
assert code == "internal", answer
assert "/" not in answer["message"] and "sqlite" not in answer["message"].lower(), answer
print("the broker's trouble, said without its files")
