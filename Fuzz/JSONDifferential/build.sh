#!/usr/bin/env bash
# Fuzz/JSONDifferential/build.sh OUTPUT_PATH: the telemetry JSONScanner against JSONParser.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping JSON Crypto RemoteConfig Rollout TerminalText Telemetry
