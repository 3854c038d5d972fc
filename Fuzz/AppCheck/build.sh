#!/usr/bin/env bash
# Builds the AppCheck libFuzzer target: Fuzz/AppCheck/build.sh OUTPUT_PATH (AppCheck as a module, built once for both of the
# targets that use it, and imported @testable: the entry reaches its internal parsers).
set -euo pipefail
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "${1:?usage: build.sh OUTPUT_PATH}" "$(dirname "$0")" Timekeeping Crypto JSON AppCheck
