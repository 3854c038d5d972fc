#!/usr/bin/env bash
# Builds one libFuzzer target: scripts/fuzz-build.sh OUTPUT_PATH ENTRY_DIR [MODULE ...] [-- EXTRA_SOURCE ...]
# SwiftPM cannot link an executable against libFuzzer's main, so swiftc builds each MODULE (in dependency
# order, from Sources/MODULE) as a static library with -enable-testing (entries may `@testable import` it),
# caching it under .build/fuzz-lib until a source of it changes; then the entry (ENTRY_DIR/FuzzEntry.swift),
# with any EXTRA_SOURCE files (paths from the repository root) compiled into the entry's own module, is linked
# against them. Everything shares one package name, so `package` declarations are visible across the modules.
set -euo pipefail
out=${1:?usage: fuzz-build.sh OUTPUT_PATH ENTRY_DIR [MODULE ...] [-- EXTRA_SOURCE ...]}
entry=${2:?usage: fuzz-build.sh OUTPUT_PATH ENTRY_DIR [MODULE ...] [-- EXTRA_SOURCE ...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
case "$entry" in /*) ;; *) entry="$PWD/$entry" ;; esac
# Platform (libc only) comes first: every other module may import it.
modules=(Platform)
extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  [ "$1" = Platform ] || modules+=("$1")
  shift
done
lib="$root/.build/fuzz-lib"
mkdir -p "$lib"
flags=(-sanitize=fuzzer,address -use-ld=lld -parse-as-library -swift-version 6 -O -g -enable-testing
  -package-name rollout -I "$root/Sources/COpenSSL" -I "$root/Sources/CQRencode/include" -I "$lib" -L "$lib")
# Archives built with other flags (an older version of this script) are rebuilt.
if [ "$(cat "$lib/flags" 2>/dev/null)" != "${flags[*]}" ]; then
  rm -f "$lib"/*.a "$lib"/*.swiftmodule
  printf '%s' "${flags[*]}" > "$lib/flags"
fi
links=()
for module in "${modules[@]}"; do
  archive="$lib/lib$module.a"
  # Rebuilt when a source is newer than the archive or a module built before it in this list was rebuilt.
  if [ ! -f "$archive" ] || [ -n "$(find "$root/Sources/$module" -name '*.swift' -newer "$archive" -print -quit)" ] \
    || [ -n "${rebuilt:-}" ]; then
    swiftc "${flags[@]}" -module-name "$module" -emit-module -emit-module-path "$lib/$module.swiftmodule" \
      -emit-library -static -o "$archive.tmp" $(find "$root/Sources/$module" -name '*.swift' | sort)
    mv "$archive.tmp" "$archive"
    rebuilt=1
  fi
  links+=("-l$module")
done
# CQRencode is a C target (its function table is defined once, in shim.c): StepUp needs its object.
if [[ " ${modules[*]} " == *" StepUp "* ]]; then
  shim="$lib/libCQRencode.a"
  if [ ! -f "$shim" ] || [ -n "$(find "$root/Sources/CQRencode" -newer "$shim" -print -quit)" ]; then
    clang -O2 -g -I "$root/Sources/CQRencode/include" -c "$root/Sources/CQRencode/shim.c" -o "$lib/CQRencode.o"
    rm -f "$shim" && ar rcs "$shim" "$lib/CQRencode.o"
  fi
  links+=(-lCQRencode)
fi
sources=("$entry/FuzzEntry.swift")
for f in "${extra[@]}"; do sources+=("$root/$f"); done
name=$(basename "$entry")
# StepUp (through RampPlans) links libqrencode.
swiftc "${flags[@]}" -module-name "${name}Fuzz" "${links[@]}" -lcrypto -lqrencode "${sources[@]}" -o "$out"
