#!/usr/bin/env bash
# Fuzz/JSON/build.sh OUTPUT_PATH: JSONParser and JSONWriter.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" JSON
