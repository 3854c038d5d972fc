#!/usr/bin/env bash
# Fuzz/Template/build.sh OUTPUT_PATH: the Remote Config template model (parse, write, parse).
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" JSON Crypto RemoteConfig
