#!/usr/bin/env bash
# libFuzzer targets (Fuzz/<Name>/FuzzEntry.swift + build.sh + corpus/), built with swiftc through
# scripts/fuzz-build.sh (SwiftPM cannot link an executable against libFuzzer's main).
#   scripts/fuzz.sh short          8 seconds per target (part of make test; about 2 minutes with the builds)
#   scripts/fuzz.sh long SECONDS   SECONDS per target (make fuzz SECONDS=600)
#   FUZZ_TARGETS="JSON Ingest" scripts/fuzz.sh short    only these targets
# Every target runs even when one fails; the script fails when any target found a crash, and the crashing
# input is kept as .build/fuzz-artifacts/<Name>-crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-short}
secs=${2:-600}
[ -n "$secs" ] || secs=600
[ "$mode" = short ] && secs=8
shopt -s nullglob
if [ -n "${FUZZ_TARGETS:-}" ]; then
  targets=(); for t in $FUZZ_TARGETS; do targets+=("Fuzz/$t/FuzzEntry.swift"); done
else
  targets=(Fuzz/*/FuzzEntry.swift)
fi
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets yet"; exit 0; fi
mkdir -p .build/fuzz-artifacts
failed=()
for entry in "${targets[@]}"; do
  dir=$(dirname "$entry"); name=$(basename "$dir")
  if ! "$dir/build.sh" ".build/fuzz-$name"; then failed+=("$name (build)"); continue; fi
  mkdir -p ".build/fuzz-corpus-$name"
  echo "fuzz: $name for ${secs}s"
  if ! ".build/fuzz-$name" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix=".build/fuzz-artifacts/$name-" ".build/fuzz-corpus-$name" "$dir/corpus" > ".build/fuzz-$name.log" 2>&1; then
    failed+=("$name")
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)|ERROR|SUMMARY' ".build/fuzz-$name.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (logs .build/fuzz-NAME.log, inputs .build/fuzz-artifacts/)" >&2
  exit 1
fi
echo "fuzz: every target ran clean"
