"""Checks a Tessera receipt with PyNaCl and hashlib, from docs/PROTOCOL.md and docs/LEDGER.md alone:
the Ed25519 signature over the compact, key-sorted JSON of every field but "signature" (and "log",
which is outside it), by the key in "signer"; and, where the receipt has its "log", that its entry
is the receipt's transfer, its head is signed by the same key, and its inclusion proof puts the
entry in the head's tree.

Usage: verify_receipt.py RECEIPT.json
"""
import base64
import json
import sys
from datetime import datetime

import nacl.exceptions
import nacl.signing

from ledger_log import check_head, hashes, leaf_hash, verify_inclusion

receipt = json.load(open(sys.argv[1], encoding="utf-8"))
log = receipt.pop("log", None)
signature = base64.b64decode(receipt.pop("signature"))
signed = json.dumps(receipt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
key = nacl.signing.VerifyKey(base64.b64decode(receipt["signer"]))
try:
    key.verify(signed, signature)
except nacl.exceptions.BadSignatureError:
    print("bad signature")
    sys.exit(1)
print("PyNaCl: valid signature on %s credits for %s" % (receipt["amount"], receipt["cause"]))
if log is None:
    sys.exit(0)

whole, _, fraction = receipt["amount"].partition(".")
micro = int(whole) * 1000000 + int((fraction + "000000")[:6])
at = datetime.fromisoformat(receipt["at"].replace("Z", "+00:00"))
expected = {"kind": "transfer", "debit": receipt["debit"], "credit": receipt["credit"], "amount": str(micro),
            "cause": receipt["cause"], "memo": receipt["memo"], "at": round(at.timestamp() * 1000)}
entry = log["entry"].encode("utf-8")
if entry != json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"):
    print("the log's entry is not the receipt's transfer")
    sys.exit(1)
if log["head"]["signer"] != receipt["signer"]:
    print("the head is not signed by the receipt's signer")
    sys.exit(1)
size, root = check_head(log["head"])
if not verify_inclusion(leaf_hash(entry), log["index"], size, hashes(log["proof"]), root):
    print("the inclusion proof does not hold")
    sys.exit(1)
print("hashlib: entry %d is in the signed head's tree of %d entries" % (log["index"], size))
