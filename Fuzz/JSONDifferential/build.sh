#!/usr/bin/env bash
# Fuzz/JSONDifferential/build.sh OUTPUT_PATH: JSONScanner (the ingest's reader) against JSONParser.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" JSON
