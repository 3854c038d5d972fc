#!/usr/bin/env bash
# Fuzz/ISO8601/build.sh OUTPUT_PATH: the ISO 8601 parser of Timekeeping.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping
