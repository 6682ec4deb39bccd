"""Checks a Tessera receipt with PyNaCl, from docs/PROTOCOL.md alone: the Ed25519 signature over the
compact, key-sorted JSON of every field but "signature", by the key in "signer".

Usage: verify_receipt.py RECEIPT.json
"""
import base64
import json
import sys

import nacl.exceptions
import nacl.signing

receipt = json.load(open(sys.argv[1], encoding="utf-8"))
signature = base64.b64decode(receipt.pop("signature"))
signed = json.dumps(receipt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
key = nacl.signing.VerifyKey(base64.b64decode(receipt["signer"]))
try:
    key.verify(signed, signature)
except nacl.exceptions.BadSignatureError:
    print("bad signature")
    sys.exit(1)
print("PyNaCl: valid signature on %s credits for %s" % (receipt["amount"], receipt["cause"]))
