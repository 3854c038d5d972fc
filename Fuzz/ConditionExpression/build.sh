#!/usr/bin/env bash
# Fuzz/ConditionExpression/build.sh OUTPUT_PATH: the client condition expression parser.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" JSON Crypto RemoteConfig
