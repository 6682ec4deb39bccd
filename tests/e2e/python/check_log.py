"""Checks a live broker's ledger log from docs/LEDGER.md and docs/PROTOCOL.md alone: asks LOG-HEAD,
checks the head's signature, fetches every entry (LOG-ENTRIES) and hashes them into the head's
root, checks inclusion proofs (LOG-PROOF) and consistency proofs (LOG-CONSISTENCY, and LOG-HEAD
with `from`) for a spread of sizes, replays the transfers into balances and compares the mint with
LEDGER's `minted`. Prints what it checked; exits 1 at the first thing that does not hold.

Usage: check_log.py tcp://HOST:PORT   (a plaintext broker)
"""
import json
import sys

import zmq

from ledger_log import check_head, hashes, leaf_hash, root_of, verify_consistency, verify_inclusion

socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.RCVTIMEO, 60000)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(sys.argv[1])
next_id = 0


def ask(command, header):
    global next_id
    next_id += 1
    header = dict(header, id=next_id)
    socket.send_multipart([b"TESSERA/1", bytes([command]), json.dumps(header).encode()])
    while True:
        frames = socket.recv_multipart()
        reply = json.loads(frames[2])
        if reply.get("id") == next_id:
            break
    if frames[1] != b"\x07":
        raise SystemExit("%#x refused: %s" % (command, reply))
    return reply


def fail(why):
    print("LOG BROKEN:", why)
    sys.exit(1)


LOG_HEAD, LOG_PROOF, LOG_CONSISTENCY, LOG_ENTRIES, LEDGER = 0x2F, 0x30, 0x31, 0x32, 0x26

head = ask(LOG_HEAD, {})["head"]
size, root = check_head(head)
entries = []
while len(entries) < size:
    page = ask(LOG_ENTRIES, {"from": len(entries), "limit": 256})
    if not page["entries"]:
        fail("LOG-ENTRIES ends at %d, before the head's %d entries" % (len(entries), size))
    entries += page["entries"][: size - len(entries)]
leaves = [leaf_hash(entry.encode("utf-8")) for entry in entries]
if root_of(leaves) != root:
    fail("the %d entries do not hash to the head's root" % size)
print("head of %d entries signed by %s: its root is the entries' tree" % (size, head["signer"]))

checked = 0
for index in sorted({0, 1, size // 3, size // 2, size - 2, size - 1}):
    if not 0 <= index < size:
        continue
    proof = ask(LOG_PROOF, {"index": index, "size": size})
    if proof["entry"] != entries[index]:
        fail("LOG-PROOF's entry %d is not LOG-ENTRIES'" % index)
    if not verify_inclusion(leaves[index], index, size, hashes(proof["proof"]), root):
        fail("the inclusion proof of entry %d does not hold" % index)
    checked += 1
print("%d inclusion proofs hold" % checked)

consistent = 0
for first in sorted({1, 2, 3, 4, 5, 8, size // 2, size - 1, size}):
    if not 0 < first <= size:
        continue
    proof = hashes(ask(LOG_CONSISTENCY, {"from": first, "to": size})["proof"])
    if not verify_consistency(first, size, root_of(leaves[:first]), root, proof):
        fail("the consistency proof from %d to %d does not hold" % (first, size))
    consistent += 1
newer = ask(LOG_HEAD, {"from": size})
newer_size, newer_root = check_head(newer["head"])
if not verify_consistency(size, newer_size, root, newer_root, hashes(newer["consistency"])):
    fail("the newer head of %d does not extend the head of %d" % (newer_size, size))
print("%d consistency proofs hold, and the newest head (%d entries) extends the first" % (consistent + 1, newer_size))

balances = {}
for entry in map(json.loads, entries):
    if entry["kind"] != "transfer":
        continue
    amount = int(entry["amount"])
    balances[entry["debit"]] = balances.get(entry["debit"], 0) - amount
    balances[entry["credit"]] = balances.get(entry["credit"], 0) + amount
negative = [name for name, micro in balances.items() if micro < 0 and name != "mint"]
if negative:
    fail("accounts below zero: %s" % negative)
minted = ask(LEDGER, {})["minted"]
replayed = -balances.get("mint", 0)
if round(float(minted) * 1e6) != replayed:
    fail("LEDGER says %s credits minted, the log %d micro-credits" % (minted, replayed))
print("replayed %d transfers: %s credits minted, as LEDGER says" % (sum(1 for e in entries if '"kind":"transfer"' in e), minted))
