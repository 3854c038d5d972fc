#!/usr/bin/env bash
# Fuzz/Theme/build.sh OUTPUT_PATH: the console's theme file parser.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping JSON Crypto RemoteConfig Rollout Telemetry StepUp RampPlans Console
