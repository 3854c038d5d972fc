#!/usr/bin/env bash
# Builds the AppCheck libFuzzer target: Fuzz/AppCheck/build.sh OUTPUT_PATH
# SwiftPM cannot link an executable against libFuzzer's main, so swiftc builds the module's dependencies
# (Timekeeping, Crypto, JSON) as static libraries, then the fuzz entry together with the AppCheck sources.
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_PATH}
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-sanitize=fuzzer,address -use-ld=lld -parse-as-library -swift-version 6 -O -g -package-name rollout -I "$root/Sources/COpenSSL" -I "$work" -L "$work")
for module in Timekeeping Crypto JSON; do
  swiftc "${flags[@]}" -module-name "$module" -emit-module -emit-module-path "$work/$module.swiftmodule" \
    -emit-library -static -o "$work/lib$module.a" "$root/Sources/$module"/*.swift
done
swiftc "${flags[@]}" -module-name AppCheckFuzz -lCrypto -lTimekeeping -lJSON -lcrypto \
  "$root/Fuzz/AppCheck/FuzzEntry.swift" "$root/Sources/AppCheck"/*.swift -o "$out"
