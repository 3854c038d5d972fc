#!/usr/bin/env bash
# Fuzz/Scenario/build.sh OUTPUT_PATH: the scenario file parser (its source files, without the simulator).
exec "$(dirname "$0")/../../scripts/fuzz-build.sh" "$1" "$(dirname "$0")" Timekeeping JSON Crypto RemoteConfig Rollout Telemetry \
  -- Sources/FleetSimulator/Scenario.swift Sources/FleetSimulator/FleetParameters.swift Sources/FleetSimulator/SimulationSpeed.swift \
  Sources/FleetSimulator/BuiltInScenarios.swift
