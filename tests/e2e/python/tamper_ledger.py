"""A dishonest operator rewrites its broker's books while the broker is stopped, and leaves them
consistent: the accounts, the transfers, the ledger's log and its tiles all agree afterwards, so
that only a head signed before the rewrite can tell (docs/LEDGER.md, "Watching the log").

Usage: tamper_ledger.py BROKER.sqlite change-amount   (halves the first shard payment)
       tamper_ledger.py BROKER.sqlite delete-slash    (takes the first slash out of history)
Prints what it changed.
"""
import json
import sqlite3
import sys

from ledger_log import leaf_hash, node_hash

db = sqlite3.connect(sys.argv[1])
what = sys.argv[2]


def move(account, delta):
    db.execute("UPDATE ledger_accounts SET balance = balance + ? WHERE name = ?", (delta, account))


def rewrite_tiles():
    """The perfect subtrees of 256, 65,536, ... leaves, from the leaves as they are now."""
    db.execute("DELETE FROM ledger_log_tiles")
    row = [bytes.fromhex(h) for (h,) in db.execute("SELECT leaf_hash FROM ledger_log ORDER BY idx")]
    level = 0
    while len(row) >= 256:
        tiles = []
        for start in range(0, len(row) - 255, 256):
            hashes = row[start:start + 256]
            while len(hashes) > 1:
                hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
            tiles.append(hashes[0])
        level += 8
        db.executemany("INSERT INTO ledger_log_tiles (level, idx, hash) VALUES (?, ?, ?)",
                       [(level, i, tile.hex()) for i, tile in enumerate(tiles)])
        row = tiles


def entry_bytes(entry):
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


if what == "change-amount":
    idx, text = db.execute("SELECT idx, entry FROM ledger_log WHERE entry LIKE '%\"cause\":\"pay:%' ORDER BY idx").fetchone()
    entry = json.loads(text)
    amount = int(entry["amount"])
    less = amount // 2
    entry["amount"] = str(amount - less)
    new = entry_bytes(entry)
    db.execute("UPDATE ledger_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (new.decode(), leaf_hash(new).hex(), idx))
    db.execute("UPDATE ledger_transfers SET amount = ? WHERE cause = ?", (amount - less, entry["cause"]))
    move(entry["debit"], less)
    move(entry["credit"], -less)
    print("entry %d (%s) now pays %d micro-credits instead of %d" % (idx, entry["cause"], amount - less, amount))
elif what == "delete-slash":
    idx, text = db.execute("SELECT idx, entry FROM ledger_log WHERE entry LIKE '%\"cause\":\"slash:%' ORDER BY idx").fetchone()
    entry = json.loads(text)
    rows = db.execute("SELECT idx, entry, leaf_hash FROM ledger_log WHERE idx > ? ORDER BY idx", (idx,)).fetchall()
    db.execute("DELETE FROM ledger_log WHERE idx >= ?", (idx,))
    db.executemany("INSERT INTO ledger_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", [(i - 1, e, h) for i, e, h in rows])
    db.execute("DELETE FROM ledger_transfers WHERE cause = ?", (entry["cause"],))
    db.execute("UPDATE ledger_transfers SET log_idx = log_idx - 1 WHERE log_idx > ?", (idx,))
    move(entry["debit"], int(entry["amount"]))
    move(entry["credit"], -int(entry["amount"]))
    print("entry %d (%s, %s micro-credits) is gone from history" % (idx, entry["cause"], entry["amount"]))
else:
    sys.exit("change-amount or delete-slash")
rewrite_tiles()
db.commit()
