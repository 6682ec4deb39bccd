"""The ledger's log as docs/LEDGER.md defines it, written from that page alone (hashlib, PyNaCl):
leaf and node hashing (RFC 6962), heads signed with Ed25519 over the compact key-sorted JSON of
every field but "signature", and RFC 9162's checks of inclusion and consistency proofs.
Used by check_log.py (a live broker) and verify_receipt.py (a receipt file)."""
import base64
import hashlib
import json

import nacl.exceptions
import nacl.signing


def leaf_hash(entry_bytes):
    return hashlib.sha256(b"\x00" + entry_bytes).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_of(leaf_hashes):
    """MTH over leaf hashes: split at the largest power of two below n."""
    n = len(leaf_hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(root_of(leaf_hashes[:k]), root_of(leaf_hashes[k:]))


def signed_bytes(document):
    unsigned = {key: value for key, value in document.items() if key != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def check_signature(document):
    key = nacl.signing.VerifyKey(base64.b64decode(document["signer"]))
    try:
        key.verify(signed_bytes(document), base64.b64decode(document["signature"]))
    except nacl.exceptions.BadSignatureError:
        raise ValueError("bad signature on a %s" % document.get("kind"))


def check_head(head):
    """A signed head: its kind, fields and signature. Returns (size, root bytes)."""
    if head.get("kind") != "tessera-log-head":
        raise ValueError("not a tessera-log-head")
    if set(head) != {"kind", "network", "size", "root", "at", "signer", "signature"}:
        raise ValueError("a head's fields are kind, network, size, root, at, signer, signature")
    check_signature(head)
    return head["size"], bytes.fromhex(head["root"])


def verify_inclusion(leaf, index, size, proof, root):
    """RFC 9162, section 2.1.3.2."""
    if index < 0 or index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first, second, first_root, second_root, proof):
    """RFC 9162, section 2.1.4.2."""
    if first == 0:
        return proof == []
    if first > second:
        return False
    if first == second:
        return proof == [] and first_root == second_root
    if first & (first - 1) == 0:
        proof = [first_root] + proof
    if not proof:
        return False
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0


def hashes(hex_list):
    return [bytes.fromhex(h) for h in hex_list]
