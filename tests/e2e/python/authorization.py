"""Who may do what (docs/PROTOCOL.md, "Who may do what"), row by row against a real broker under
CURVE, from four callers: the job's owner, another client, a registered node and the operator (a
key in Broker/OperatorKeys). Each row names a request and what each caller must get: "ok", or the
ERROR code. Written from the docs with pyzmq; prints the table it checked.

Usage: authorization.py ENDPOINT SERVER_KEY OWNER.key OTHER.key OPERATOR.key JOB_ID
(key files as tessera-job writes them: "public KEY" and "secret KEY" lines, Z85)
"""
import hashlib
import json
import sys

import zmq

endpoint, server_key, owner_file, other_file, operator_file, job_id = sys.argv[1:7]
context = zmq.Context()


def keys_of(path):
    found = dict(line.split(" ", 1) for line in open(path).read().splitlines() if " " in line)
    return found["public"].strip(), found["secret"].strip()


class Caller:
    def __init__(self, name, keys):
        self.name, (self.public, secret) = name, keys
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.RCVTIMEO, 20000)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.curve_serverkey = server_key.encode()
        self.socket.curve_publickey = self.public.encode()
        self.socket.curve_secretkey = secret.encode()
        self.socket.connect(endpoint)
        self.next_id = 1

    def ask(self, command, header, payload=None):
        header = dict(header, id=self.next_id)
        self.next_id += 1
        frames = [b"TESSERA/1", bytes([command]), json.dumps(header).encode()]
        if payload is not None:
            frames.append(payload)
        self.socket.send_multipart(frames)
        while True:
            reply = self.socket.recv_multipart()
            answer = json.loads(reply[2])
            if reply[1][0] == 0x03 or answer.get("id") != header["id"]:
                continue  # heartbeats, and what a node is sent unasked
            if reply[1][0] == 0x08:
                return answer["code"], answer
            return "ok", answer


owner = Caller("owner", keys_of(owner_file))
other = Caller("other", keys_of(other_file))
operator = Caller("operator", keys_of(operator_file))
node_public, node_secret = (k.decode() for k in zmq.curve_keypair())
node = Caller("node", (node_public, node_secret))
code, welcome = node.ask(0x01, {"node": {"nodeId": "whatever", "name": "auth-node", "softwareVersion": "x",
                                         "runtimeProfile": "p", "devices": [], "maxThreads": 1}})
assert code == "ok" and welcome["nodeId"] == node_public, welcome  # a node is who its key says
callers = [owner, other, node, operator]
public = {c.name: c.public for c in callers}

status = owner.ask(0x21, {"jobId": job_id})[1]["job"]
weights = status["weightsSha256"]
escrow = "escrow:" + job_id
uploaded = b"a blob the other client uploads"
uploaded_sha = hashlib.sha256(uploaded).hexdigest()

# (what, command, header, payload, {caller: expected}, check(caller, answer) for the ok ones)
ALL_OK = {c.name: "ok" for c in callers}
rows = [
    ("QUOTE", 0x24, {"job": {"name": "q", "model": {"zoo": "mlp", "hidden": [8]}, "dataset": {"builtin": "fashion-mnist"},
                             "optimizer": {"kind": "sgd", "lr": 0.1},
                             "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 1, "batchSize": 8},
                             "budget": "1"}}, None, ALL_OK, None),
    ("STATUS of the owner's job", 0x21, {"jobId": job_id}, None, ALL_OK,
     lambda c, a: ("weightsSha256" in a["job"]) == (c in ("owner", "operator"))),
    ("LIST", 0x22, {}, None, ALL_OK,
     lambda c, a: all(("weightsSha256" in j) == (c in ("owner", "operator")) for j in a["jobs"] if j["jobId"] == job_id)),
    ("BALANCE (own)", 0x25, {}, None, ALL_OK, lambda c, a: a["account"] == public[c]),
    ("BALANCE of the owner", 0x25, {"account": owner.public}, None,
     {"owner": "ok", "other": "forbidden", "node": "forbidden", "operator": "ok"}, None),
    ("LEDGER", 0x26, {}, None, ALL_OK, lambda c, a: a["consistent"]),
    ("NODES", 0x28, {}, None, ALL_OK,
     lambda c, a: all(("balance" in n) == (c == "operator" or n["nodeId"] == public[c]) for n in a["nodes"])),
    ("VERIFICATIONS", 0x2D, {"jobId": job_id}, None, ALL_OK, None),
    ("RECEIPT of the job's escrow", 0x27, {"cause": escrow}, None,
     {"owner": "ok", "other": "forbidden", "node": "forbidden", "operator": "ok"}, None),
    ("GET the job's weights", 0x10, {"sha256": weights, "offset": 0, "length": 16}, None,
     {"owner": "ok", "other": "forbidden", "node": "forbidden", "operator": "ok"}, None),
    ("READY", 0x04, {"slots": 1}, None,
     {"owner": "not-registered", "other": "not-registered", "operator": "not-registered"}, None),
    ("COMMIT", 0x29, {"commitment": {}}, None,
     {"owner": "not-registered", "other": "not-registered", "operator": "not-registered", "node": "invalid"}, None),
    ("RESULT", 0x06, {"assignment": "0000000000000000", "result": {}}, None,
     {"owner": "not-registered", "other": "not-registered", "operator": "not-registered", "node": "invalid"}, None),
    ("CHECKPOINT", 0x2A, {"verification": "v0000000000000000"}, None,
     {"owner": "not-registered", "other": "not-registered", "operator": "not-registered", "node": "invalid"}, None),
    ("STAKE unsigned", 0x2C, {"request": {"kind": "tessera-stake"}}, None,
     {c.name: "invalid" for c in callers}, None),
    ("PUT a new blob (by other)", 0x12, {"sha256": uploaded_sha, "offset": 0, "size": len(uploaded)}, uploaded,
     {"other": "ok"}, lambda c, a: a["complete"]),
    ("GET that blob", 0x10, {"sha256": uploaded_sha, "offset": 0, "length": 16}, None,
     {"owner": "forbidden", "other": "ok", "node": "forbidden", "operator": "ok"}, None),
    ("SUBMIT naming the other's blob", 0x20,
     {"job": {"name": "borrowed", "model": {"torchscript": {"sha256": uploaded_sha}}, "dataset": {"builtin": "fashion-mnist"},
              "optimizer": {"kind": "sgd", "lr": 0.1},
              "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 1, "batchSize": 8}, "budget": "1"}}, None,
     {"owner": "forbidden", "node": "forbidden"}, None),
    # A blob's hash is no key to it: a PUT of a blob the broker has completes only with its bytes.
    ("PUT 1 byte under the weights", 0x12, {"sha256": weights, "offset": 0, "size": 1}, b"x",
     {"other": "hash-mismatch", "node": "hash-mismatch"}, None),
    ("GET the weights after that", 0x10, {"sha256": weights, "offset": 0, "length": 16}, None,
     {"other": "forbidden", "node": "forbidden"}, None),
    ("PUT 1st byte of that blob", 0x12, {"sha256": uploaded_sha, "offset": 0, "size": len(uploaded)}, uploaded[:1],
     {"owner": "ok"}, lambda c, a: not a["complete"]),
    ("GET it after 1 byte", 0x10, {"sha256": uploaded_sha, "offset": 0, "length": 16}, None,
     {"owner": "forbidden"}, None),
    ("PUT that blob whole", 0x12, {"sha256": uploaded_sha, "offset": 0, "size": len(uploaded)}, uploaded,
     {"owner": "ok"}, lambda c, a: a["complete"]),
    ("GET it, proven", 0x10, {"sha256": uploaded_sha, "offset": 0, "length": 16}, None,
     {"owner": "ok"}, None),
    ("CANCEL the owner's job", 0x23, {"jobId": job_id}, None,
     {"other": "forbidden", "node": "forbidden", "owner": "ok"}, None),
]

failures = 0
print("%-32s %-16s %-16s %-16s %-16s" % ("request", "owner", "other", "node", "operator"))
for what, command, header, payload, expected, check in rows:
    cells = []
    for caller in callers:
        want = expected.get(caller.name)
        if want is None:
            cells.append("-")
            continue
        got, answer = caller.ask(command, header, payload)
        good = got == want and (got != "ok" or check is None or check(caller.name, answer))
        if not good:
            failures += 1
            print("  %s by %s: wanted %s, got %s %s" % (what, caller.name, want, got, json.dumps(answer)[:300]))
        cells.append(got + ("" if good else " (!)"))
    print("%-32s %-16s %-16s %-16s %-16s" % tuple([what] + cells))
assert failures == 0, "%d rows broke the authorization table" % failures
print("every row as the table says")
