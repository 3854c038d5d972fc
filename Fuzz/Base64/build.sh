#!/usr/bin/env bash
# Builds the Base64 libFuzzer target: Fuzz/Base64/build.sh OUTPUT_PATH
# The fuzz entry is compiled together with the Crypto sources (Base64 lives in Sources/Crypto/Encoding.swift), on
# Platform (scripts/fuzz-build.sh builds it as a module).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sources=()
for f in "$root"/Sources/Crypto/*.swift; do sources+=("${f#"$root"/}"); done
exec "$root/scripts/fuzz-build.sh" "${1:?usage: build.sh OUTPUT_PATH}" "$(dirname "$0")" -- "${sources[@]}"
