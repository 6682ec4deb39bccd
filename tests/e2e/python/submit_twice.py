"""A client that gave up waiting for its SUBMIT and asks again, against a real plaintext broker
whose operator credited ACCOUNT with 50 credits (docs/PROTOCOL.md, "Submitting twice"):

1. The first SUBMIT, named by a request id, is sent and its connection closed before any answer
   (a client that timed out and was killed).
2. The same SUBMIT again, on a new connection: the broker answers with a job.
3. Again: the same job. LIST shows one job, and BALANCE one escrow (50 - the budget).
4. The same request id with another spec: ERROR invalid naming requestId; nothing more escrowed.

Usage: submit_twice.py ENDPOINT ACCOUNT
"""
import json
import sys
import time

import zmq

endpoint, account = sys.argv[1], sys.argv[2]
context = zmq.Context()
SUBMIT, LIST, BALANCE = b"\x20", b"\x22", b"\x25"
OK = 0x07
job = {"version": 1, "name": "asked twice", "model": {"zoo": "mlp", "hidden": [16]},
       "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05},
       "training": {"rounds": 10, "shardsPerRound": 1, "localSteps": 2, "batchSize": 8, "seed": 1, "threads": 1},
       "budget": "20"}


def connect():
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.RCVTIMEO, 120000)
    socket.connect(endpoint)
    return socket


def ask(socket, command, header, request_id):
    header = dict(header, id=request_id, owner=account)
    socket.send_multipart([b"TESSERA/1", command, json.dumps(header).encode()])
    while True:
        reply = socket.recv_multipart()
        if reply[1][0] == 0x03:  # HEARTBEAT: the broker is at work on it
            continue
        answer = json.loads(reply[2])
        if answer.get("id") != request_id:
            continue
        return ("ok" if reply[1][0] == OK else answer.get("code")), answer


# 1. Sent, never waited for: the connection goes (its message delivered first: linger).
gone = connect()
gone.setsockopt(zmq.LINGER, 5000)
gone.send_multipart([b"TESSERA/1", SUBMIT,
                     json.dumps({"id": 1, "owner": account, "job": job, "requestId": "retry-1"}).encode()])
gone.close()
print("the first SUBMIT sent; its client is gone")

# 2, 3. Asked again: one job.
socket = connect()
socket.setsockopt(zmq.LINGER, 0)
code, first = ask(socket, SUBMIT, {"job": job, "requestId": "retry-1"}, 2)
assert code == "ok", first
code, second = ask(socket, SUBMIT, {"job": job, "requestId": "retry-1"}, 3)
assert code == "ok" and second["jobId"] == first["jobId"], (first, second)
print("asked again twice: job", first["jobId"], "both times")
code, listing = ask(socket, LIST, {"all": True}, 4)
assert code == "ok", listing
jobs = [j["jobId"] for j in listing["jobs"]]
assert jobs == [first["jobId"]], jobs
code, balance = ask(socket, BALANCE, {}, 5)
assert code == "ok", balance
print("jobs:", jobs, "balance:", balance["balance"])
assert float(balance["balance"]) == 30.0, balance

# 4. Another spec under the same name.
other = dict(job, name="another job")
code, refused = ask(socket, SUBMIT, {"job": other, "requestId": "retry-1"}, 6)
print("another spec under the same request id:", code, refused.get("message"))
assert code == "invalid" and "requestId" in refused["message"], refused
code, balance = ask(socket, BALANCE, {}, 7)
assert code == "ok" and float(balance["balance"]) == 30.0, balance
print("one job, one escrow")
