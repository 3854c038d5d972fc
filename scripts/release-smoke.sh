#!/usr/bin/env bash
# The release binary, as `make demo` and `make bench` build it, through one command per native library and
# store: the tests run a debug build, and what only optimised code shows (libpq's table was once one per source
# file of PostgresStore, and -O code called an empty copy: a crash on every PostgreSQL store) would otherwise
# reach users unseen. Each step checks what the command printed, not only its exit status.
#
# Usage: scripts/release-smoke.sh [path/to/rollout]   (default: .build/release/rollout, built by `make release`)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-.build/release/rollout}")
shared=${ROLLOUT_SHARED:-$(realpath ../shared)}
work=$(mktemp -d -t rollout-release-smoke.XXXXXX)
pg_data=""
cleanup() {
    if [ -n "$pg_data" ] && [ -f "$pg_data/postmaster.pid" ]; then
        as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
export ROLLOUT_OPERATOR=smoke@release
step() { printf '  release smoke: %s\n' "$1"; }
fail() { printf 'release smoke FAILED: %s\n' "$1" >&2; exit 1; }
expect() {  # expect NAME PATTERN FILE
    grep -q -- "$2" "$3" || { cat "$3" >&2; fail "$1: expected '$2'"; }
}

step "no corelibs Foundation linked (FoundationEssentials and Platform only)"
if nm "$bin" | grep -q -e 's10Foundation' -e 'CFRunLoop'; then
    fail "the release binary links corelibs Foundation: a module imports Foundation (use FoundationEssentials and Platform)"
fi

step "one function table per library loaded with dlopen (defined in its shim.c, not a header's static)"
# A header's static would be one copy per object, and -O code inlined into another file would call an empty one.
symbols=$(nm "$bin")
for table in rollout_curl_api_table rollout_fido2_api_table rollout_mhd_api_table rollout_pq_api_table rollout_qrencode_api_table; do
    n=$(grep -c -E " [BbDd] $table\$" <<<"$symbols" || true)
    [ "$n" = 1 ] || fail "$table is defined $n times in the release binary, not once (Sources/C*/shim.c)"
done

step "no shared library linked that a static archive (.build/static-libs) or dlopen on first use replaces"
# Every shared library a command loads costs it start-up time (the cli-startup and cli-nudge benches). Two ways
# back were taken once already: a pkg-config module put the system's library directory before .build/static-libs
# on the link line, so libcrypto, libsqlite3 and ncurses were linked as shared libraries again; and a library
# linked rather than opened on first use (libfido2, with libcbor, libudev and libz) loaded with every command.
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for archive in .build/static-libs/lib*.a; do
    [ -e "$archive" ] || continue
    name=$(basename "$archive" .a)
    if grep -q "^$name\.so" <<<"$needed"; then
        fail "$name is linked as a shared library although .build/static-libs has $name.a (a -L ahead of it on the link line?)"
    fi
done
for lib in libfido2 libpq libcurl libmicrohttpd libqrencode; do
    if grep -q "^$lib\.so" <<<"$needed"; then
        fail "$lib is linked: it is opened with dlopen on first use (Sources/C*/shim.c), so commands that do not use it do not load it"
    fi
done

step "SQLite store: init, set, nudge, status, audit verify"
store="$work/rollout.db"
"$bin" init --store "$store" --seed smoke-seed >"$work/out" 2>&1
"$bin" set 10 --store "$store" --reason "release smoke" >"$work/out" 2>&1
"$bin" nudge +0.5 --store "$store" --reason "release smoke" >"$work/out" 2>&1
"$bin" status --json --store "$store" >"$work/status.json"
python3 - "$work/status.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
text = json.dumps(s)
assert '10.5' in text, f"status does not show 10.5%: {text[:400]}"
EOF
"$bin" audit verify --store "$store" >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "audit verify"; }

step "ingest: native events into the store"
cat >"$work/events.ndjson" <<EOF
{"t":$(($(date +%s) - 120))000000,"i":"fid-smoke-1","k":"session","c":"enabled","os":"17.4.1","app":"3.2.1"}
{"t":$(($(date +%s) - 60))000000,"i":"fid-smoke-2","k":"success","p":"appAttest","c":"control","os":"17.4.1","app":"3.2.1"}
EOF
"$bin" ingest --store "$store" "$work/events.ndjson" >"$work/out" 2>&1
expect ingest "ingested 2 events from 2 installations" "$work/out"

step "evaluate: Firebase's percentiles (firebase-admin's own figures)"
vectors="$shared/vectors/remote-config"
grep -v '^#' "$vectors/rollout-2026-10pct.tsv" | cut -f1 >"$work/ids"
"$bin" evaluate --template "$vectors/rollout-2026-10pct.server-template.json" --ids-file "$work/ids" >"$work/values"
paste "$work/values" <(grep -v '^#' "$vectors/rollout-2026-10pct.tsv") \
    | awk -F'\t' '$1 != $3 || $2 != $4 { bad++ } END { exit bad > 0 }' || fail "evaluate disagrees with firebase-admin"

step "attest verify: a real Apple attestation (libcrypto)"
python3 - "$shared/vectors/appattest/veehaitch-ios-14.4.json" >"$work/attest.args" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
c = v["client_data_hash_or_challenge"]
flag = "--client-data" if c["kind"] == "sha256_of_client_data" else "--client-data-hash"
print("\n".join(["--attestation", v["attestation_b64"], "--key-id", v["key_id_b64"], "--team", v["team_id"],
                 "--bundle", v["bundle_id"], flag, c["value_b64"], "--env", v["environment"],
                 "--at", v["verify_at_time"]]))
EOF
mapfile -t attest_args <"$work/attest.args"
"$bin" attest verify "${attest_args[@]}" >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "attest verify"; }

# PostgreSQL: a scratch server of Debian's postgresql, on a Unix socket only, as the tests start it.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
    fail "PostgreSQL's initdb is missing (scripts/deps.sh test installs postgresql)"
fi
if [ "$(id -u)" = 0 ]; then
    as_pg() { (cd / && runuser -u nobody -- "$@"); }  # from a directory nobody may enter
    chmod 755 "$work"
else
    as_pg() { "$@"; }
fi
step "PostgreSQL team store: init, nudge, status"
pg_data="$work/pg/data"
mkdir -p "$work/pg" && chmod 755 "$work/pg"
[ "$(id -u)" = 0 ] && chown nobody "$work/pg"
as_pg "$pg_bin/initdb" -D "$pg_data" -U rollout --auth=trust >"$work/pg/initdb.log" 2>&1 || { cat "$work/pg/initdb.log" >&2; fail initdb; }
as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$work/pg/server.log" -w \
    -o "-c listen_addresses='' -c unix_socket_directories=$work/pg -c fsync=off" start >/dev/null
pg="postgresql:///postgres?host=$work/pg&user=rollout"
"$bin" init --store "$pg" --seed smoke-seed >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "init on PostgreSQL"; }
"$bin" set 20 --store "$pg" --reason "release smoke" >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "set on PostgreSQL"; }
"$bin" nudge -0.5 --store "$pg" --reason "release smoke" >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "nudge on PostgreSQL"; }
"$bin" status --json --store "$pg" >"$work/status.json" 2>&1 || { cat "$work/status.json" >&2; fail "status on PostgreSQL"; }
grep -q '19.5' "$work/status.json" || { cat "$work/status.json" >&2; fail "PostgreSQL status does not show 19.5%"; }
step "all passed ($bin)"
