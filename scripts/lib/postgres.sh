# A PostgreSQL server for tests and benches that run brokers on one (docs/STORE.md): Debian's
# initdb and pg_ctl (postgresql-15) in a folder of its own, run as the `postgres` user when root
# (PostgreSQL refuses to run as root), with trust authentication for its one role, `tessera`, and
# one database, `tessera`. Source it from bash:
#
#   . scripts/lib/postgres.sh
#   pg_start DIR [ADDRESS SUBNET]   # a server in DIR (made; its socket there too), listening on
#                                   # ADDRESS:5432 for SUBNET (a.b.c.0/24) where given; sets PG_URI
#                                   # (the Unix socket's) and PG_TCP_URI; returns 77 where
#                                   # PostgreSQL is not installed, 1 when it does not start
#   PG_RUN=(in_host 0)              # (before pg_start) how to run its programs: in a namespace
#   pg_stop                         # stops it (immediate) and removes DIR

PG_DIR=
PG_BIN=
PG_RUN=()

pg_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        "${PG_RUN[@]}" runuser -u postgres -- "$@"
    else
        "${PG_RUN[@]}" "$@"
    fi
}

pg_start() {
    local dir=$1 address=${2:-} subnet=${3:-} listen="''"
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || return 77
    mkdir -p "$dir" || return 1
    [ "$(id -u)" != 0 ] || chown postgres "$dir" || return 1
    PG_DIR=$dir
    pg_as_owner "$PG_BIN/initdb" -D "$dir/data" -U tessera -A trust -E UTF8 --locale=C --no-sync > "$dir/initdb.log" 2>&1 || return 1
    if [ -n "$address" ]; then
        listen="'$address'"
        echo "host all all $subnet trust" >> "$dir/data/pg_hba.conf"
    fi
    pg_as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -c listen_addresses=$listen -c max_connections=60" start > /dev/null || return 1
    pg_as_owner "$PG_BIN/createdb" -h "$dir" -U tessera tessera || return 1
    PG_URI="postgresql:///tessera?host=$dir&user=tessera"
    PG_TCP_URI="postgresql://tessera@$address:5432/tessera"
}

pg_stop() {
    [ -n "$PG_DIR" ] || return 0
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop > /dev/null 2>&1 || true
    rm -rf "$PG_DIR"
    PG_DIR=
}
