#!/usr/bin/env bash
# Fuzz/Token/build.sh OUTPUT_PATH: the App Check token verifier, with the AppCheck sources compiled into the entry's module.
root=$(cd "$(dirname "$0")/../.." && pwd)
sources=()
for f in "$root"/Sources/AppCheck/*.swift; do sources+=("${f#"$root"/}"); done
exec "$root/scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping Crypto JSON -- "${sources[@]}"
