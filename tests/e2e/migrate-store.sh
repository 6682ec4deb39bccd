#!/usr/bin/env bash
# tessera-broker migrate-store as an operator runs it (docs/STORE.md, "Moving a network to
# PostgreSQL"): a broker's SQLite books with an operator's credit moved into an empty PostgreSQL
# database, where `balance` reads the same figure; a second move into it is refused. Exits 77
# (skipped) where PostgreSQL is not installed.
# Usage: migrate-store.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/migrate-store.XXXXXX")
. "$here/../../scripts/lib/postgres.sh"
cleanup() {
    pg_stop
    rm -rf "$work"
}
trap cleanup EXIT
started=0
pg_start "$(mktemp -d /tmp/tessera-pg-XXXXXX)" || started=$?
[ "$started" -ne 77 ] || { echo "migrate-store: PostgreSQL is not installed: skipped"; exit 77; }
[ "$started" -eq 0 ] || { echo "PostgreSQL did not start"; exit 1; }

broker() { "$bin/tessera-broker" --config /dev/null "$@"; }
account=Zk9XJ5b0wDQmL0AuLr9n6TkQbS2tqF0hD1VnqW7e # any 40-character name
# A broker makes its database on first start: credited while it runs, then stopped.
broker --data "$work/broker" --bind "ipc://$work/broker.sock" > "$work/broker.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
until broker --data "$work/broker" credit --memo "before the move" -- "$account" 12.5 > "$work/credit.txt" 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "the broker did not start"; cat "$work/broker.log"; exit 1; }
    sleep 0.5
done
kill -TERM "$pid"
wait "$pid" || true
broker --data "$work/broker" balance -- "$account" > "$work/before.txt"
broker --data "$work/broker" migrate-store --to "$PG_URI" > "$work/moved.txt" 2>&1 || { cat "$work/moved.txt"; exit 1; }
grep -q "the books balance" "$work/moved.txt" || { echo "FAIL: $(cat "$work/moved.txt")"; exit 1; }
broker --database "$PG_URI" balance -- "$account" > "$work/after.txt"
if ! cmp -s "$work/before.txt" "$work/after.txt"; then
    echo "FAIL: the balance was '$(cat "$work/before.txt")' before the move and '$(cat "$work/after.txt")' after"
    exit 1
fi
if broker --data "$work/broker" migrate-store --to "$PG_URI" > "$work/again.txt" 2>&1 || ! grep -q "not empty" "$work/again.txt"; then
    echo "FAIL: a second move was not refused: $(cat "$work/again.txt")"
    exit 1
fi
echo "migrate-store: $(cut -d';' -f1 "$work/moved.txt"); on PostgreSQL $(cat "$work/after.txt")"
