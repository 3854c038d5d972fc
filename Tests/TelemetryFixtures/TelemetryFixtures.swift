import Foundation
import Rollout
import SQLiteStore
import Telemetry
import TestSupport
import Timekeeping

// The store and events the telemetry tests land: TelemetryTests and TelemetryIngestTests (whose spill tests land
// what they ingest) share them.

/// A fresh store file in a temporary directory.
public func temporaryTables(retention: TelemetryRetention = TelemetryRetention()) throws -> TelemetryTables {
    let dir = try TestSupport.temporaryDirectory("telemetry")
    return try TelemetryTables(
        database: SQLiteDatabase(path: dir.appendingPathComponent("store.db").path), retention: retention)
}

public let t0 = Instant(seconds: 1_780_000_020)  // 2026-05-28T20:27:00Z, on a minute boundary

public func event(
    _ seconds: Int64, _ id: String, _ kind: TelemetryEventKind, _ cohort: Cohort,
    provider: AttestationProvider = .appAttest,
    os: String = "17.4"
) -> TelemetryEvent {
    TelemetryEvent(
        time: t0 + .seconds(seconds), installationID: id, kind: kind, cohort: cohort, provider: provider, osVersion: os,
        appVersion: "3.2.1")
}

public func batch(_ events: [TelemetryEvent]) -> TelemetryBatch {
    let b = TelemetryBatch()
    for e in events { b.record(e) }
    return b
}
