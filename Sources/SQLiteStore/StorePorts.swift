import Glibc
import Rollout
import StepUp
import Telemetry
import Timekeeping

// The core's ports on the store file: each adapter runs its table's SQL on the store's connection under the
// store's lock (`withDatabase`), so they can be shared by the threads of one process like the config store.

extension SQLiteStepUpStore: StepUpPolicyStore {
    public func stepUpPolicy() throws -> StepUpPolicy {
        try withStore { try OperatorTables.policy(in: $0) }
    }

    public func saveStepUpPolicy(_ policy: StepUpPolicy) throws {
        try withStore { db in try db.transaction { try OperatorTables.savePolicy(policy, in: db) } }
    }
}

/// The guardrail settings port on the `guardrail_settings` table.
extension RolloutStore: GuardrailSettingsStore {
    public func guardrailSettings() throws -> GuardrailSettings {
        try withDatabase { try GuardrailSettingsTable.load(from: $0) }
    }

    public func saveGuardrailSetting(_ key: String, _ value: String) throws {
        try withDatabase { db in try db.transaction { try GuardrailSettingsTable.save(key, value, in: db) } }
    }
}

/// The simulation heartbeat port on the `simulation_clock` table: a sealed table (`SealedTables`), so each write is
/// a write transaction of the store, which checks and renews the seal.
extension RolloutStore: SimulationHeartbeat {
    public func simulationClock() throws -> SimulationClockRecord? {
        try withDatabase { try SimulationClockTable.read(from: $0) }
    }

    public func publishSimulationClock(_ record: SimulationClockRecord) throws {
        try withDatabase { db in try db.transaction { try SimulationClockTable.write(record, in: db) } }
    }

    public func clearSimulationClock() throws {
        try withDatabase { db in try db.transaction { try SimulationClockTable.clear(in: db) } }
    }
}

/// The monitor's cache of the rollout start on the `monitor_rollout_start` table: a sealed table (`SealedTables`,
/// a forged start hid the telemetry from the assessment), written in a write transaction of the store, which checks
/// and renews the seal; the read is trusted because every write checks that seal first.
extension RolloutStore: RolloutStartCache {
    static let rolloutStartTable =
        "CREATE TABLE IF NOT EXISTS monitor_rollout_start (version INTEGER PRIMARY KEY, started_at INTEGER)"

    public func cachedRolloutStart() throws -> (version: Int, start: Instant?)? {
        try withDatabase { db in
            guard try db.hasTable("monitor_rollout_start"),
                let row = try db.query(
                    "SELECT version, started_at FROM monitor_rollout_start ORDER BY version DESC LIMIT 1"
                ).first,
                let version = row[0].int
            else { return nil }
            return (Int(version), row[1].int.map { Instant(microseconds: $0) })
        }
    }

    /// Best effort for the caller: a read-only store keeps nothing (and says so by doing nothing); a store without
    /// its key, or one that fails verification, refuses the write transaction (the caller ignores it).
    public func cacheRolloutStart(version: Int, start: Instant?) throws {
        guard !isReadOnly else { return }
        try withDatabase { db in try db.transaction { try Self.keepRolloutStart(version: version, start: start, in: db) } }
    }

    /// Kept in the `beforeCommit` of this connection's next write transaction (`installSeal`).
    public func cacheRolloutStartWithNextWrite(version: Int, start: Instant?) {
        guard !isReadOnly else { return }
        pendingRolloutStart.set((version, start))
    }

    /// Writes the entry and drops the older ones: only the newest is ever read, and the table is sealed, so every
    /// write digests it whole (one row per version published had made each write's seal grow with the history).
    static func keepRolloutStart(version: Int, start: Instant?, in db: SQLiteDatabase) throws {
        try db.createTables(["monitor_rollout_start"], rolloutStartTable)
        try db.run(
            "INSERT OR REPLACE INTO monitor_rollout_start (version, started_at) VALUES (?, ?)",
            [.integer(Int64(version)), start.map { .integer($0.microseconds) } ?? .null])
        try db.run("DELETE FROM monitor_rollout_start WHERE version < (SELECT max(version) FROM monitor_rollout_start)")
    }
}

extension RolloutStore: MonitoredStore {
    public func monitoredConfig() throws -> any ConfigStore { try configStore() }

    /// Telemetry counters on this file's connection, under its lock. One instance keeps its fold between
    /// dashboard queries: keep it as long as its reader.
    public func telemetryCounters() throws -> any TelemetryCounters {
        try withDatabase { try TelemetryTables(database: $0, lock: lock) }
    }

    public func guardrailSettingsStore() throws -> any GuardrailSettingsStore { self }
    public func simulationHeartbeat() throws -> any SimulationHeartbeat { self }
    public func rolloutStartCache() throws -> (any RolloutStartCache)? { self }

    public func reading<T>(_ body: () throws -> T) throws -> T { try withDatabase { _ in try body() } }
}
