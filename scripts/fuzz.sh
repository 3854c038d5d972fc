#!/usr/bin/env bash
# libFuzzer targets, built with swiftc directly (SwiftPM cannot link an executable against libFuzzer's main).
#   scripts/fuzz.sh short          a few seconds per target (part of make test)
#   scripts/fuzz.sh long SECONDS   a long run per target
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-short}
secs=${2:-600}
[ "$mode" = short ] && secs=15
shopt -s nullglob
targets=(Fuzz/*/FuzzEntry.swift)
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets yet"; exit 0; fi
for entry in "${targets[@]}"; do
  dir=$(dirname "$entry"); name=$(basename "$dir")
  "$dir/build.sh" ".build/fuzz-$name"
  mkdir -p ".build/fuzz-corpus-$name"
  echo "fuzz: $name for ${secs}s"
  ".build/fuzz-$name" -max_total_time="$secs" -print_final_stats=1 ".build/fuzz-corpus-$name" "$dir/corpus" 2>&1 | tail -n 12
done
