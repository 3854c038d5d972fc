#!/usr/bin/env bash
# Fuzz/Ingest/build.sh OUTPUT_PATH: the native, GA4 and Crashlytics line readers through TelemetryIngest.
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping JSON Crypto RemoteConfig Rollout Telemetry TelemetryIngest
