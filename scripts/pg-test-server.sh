#!/usr/bin/env bash
# A throw-away PostgreSQL server for tests and demos: Debian's binaries, initdb into DIR, listening only on a
# Unix socket in DIR (listen_addresses=''), trust authentication for the superuser `rollout`.
# As root the server runs as the unprivileged `nobody` (PostgreSQL refuses to run as root).
#   scripts/pg-test-server.sh start DIR   # prints the connection URI
#   scripts/pg-test-server.sh stop DIR
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?DIR}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as() { if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    mkdir -p "$dir"; chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown nobody:nogroup "$dir"
    as "$bin/initdb" -D "$dir/data" -U rollout --auth=trust -E UTF8 >/dev/null
    printf "listen_addresses = ''\nunix_socket_directories = '%s'\nmax_connections = 60\n" "$dir" >>"$dir/data/postgresql.conf"
    as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
    "$bin/psql" -X -q -d "host=$dir dbname=postgres user=rollout" -c "CREATE DATABASE rollout"
    echo "postgresql:///rollout?host=$dir&user=rollout"
    ;;
  stop) as "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
