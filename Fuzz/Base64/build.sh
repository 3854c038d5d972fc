#!/usr/bin/env bash
# Builds the Base64 libFuzzer target: Fuzz/Base64/build.sh OUTPUT_PATH
# SwiftPM cannot link an executable against libFuzzer's main, so swiftc builds the fuzz entry together with the
# Crypto sources (Base64 lives in Sources/Crypto/Encoding.swift).
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_PATH}
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
swiftc -sanitize=fuzzer,address -use-ld=lld -parse-as-library -swift-version 6 -O -g -I "$root/Sources/COpenSSL" \
  -module-name Base64Fuzz -lcrypto "$root/Fuzz/Base64/FuzzEntry.swift" "$root/Sources/Crypto"/*.swift -o "$out"
