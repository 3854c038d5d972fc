import Rollout
import Telemetry
import Timekeeping

// The monitor's ports on the PostgreSQL store (`MonitoredStore`): the same `RolloutMonitor` that judges an SQLite
// store reads the team store through these, so `status`, `telemetry`, the console and the guardrail policy give
// the same verdict for the same data on either.

/// The simulation heartbeat on `simulation_clock` (at most one row): a sealed table, written in transactions that
/// take the head lock (the seal is checked before and renewed at COMMIT).
public final class PostgresHeartbeat: SimulationHeartbeat, @unchecked Sendable {
    private let store: PostgresConfigStore

    public init(store: PostgresConfigStore) { self.store = store }

    public func simulationClock() throws -> SimulationClockRecord? {
        try store.reading {
            guard
                let r = try store.connection.query(
                    "SELECT wall_start, simulated_start, speed, wall_updated, simulated_at_update, running FROM simulation_clock WHERE id = 1"
                ).first,
                let ws = r[0].flatMap({ Int64($0) }), let ss = r[1].flatMap({ Int64($0) }), let wu = r[3].flatMap({ Int64($0) }),
                let su = r[4].flatMap({ Int64($0) })
            else { return nil }
            return SimulationClockRecord(
                wallStart: Instant(microseconds: ws), simulatedStart: Instant(microseconds: ss), speed: r[2].flatMap { Double($0) },
                wallUpdated: Instant(microseconds: wu), simulatedAtUpdate: Instant(microseconds: su), running: r[5] == "t")
        }
    }

    public func publishSimulationClock(_ record: SimulationClockRecord) throws {
        guard record.hasValidSpeed else { throw SimulationClockRecord.speedRefusal(record.speed) }
        _ = try store.transaction(lockingHead: true) {
            try store.connection.query(
                "INSERT INTO simulation_clock (id, wall_start, simulated_start, speed, wall_updated, simulated_at_update, running) "
                    + "VALUES (1, $1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET wall_start = excluded.wall_start, "
                    + "simulated_start = excluded.simulated_start, speed = excluded.speed, wall_updated = excluded.wall_updated, "
                    + "simulated_at_update = excluded.simulated_at_update, running = excluded.running",
                [
                    String(record.wallStart.microseconds), String(record.simulatedStart.microseconds), record.speed.map { String($0) },
                    String(record.wallUpdated.microseconds), String(record.simulatedAtUpdate.microseconds), record.running ? "t" : "f",
                ])
        }
    }

    public func clearSimulationClock() throws {
        _ = try store.transaction(lockingHead: true) { try store.connection.query("DELETE FROM simulation_clock") }
    }
}

/// The monitor's cache of the rollout start, on `monitor_rollout_start` (sealed: written only where the seal is
/// checked and renewed, `bestEffortSealed`). Best effort: a read-only store keeps nothing.
public final class PostgresRolloutStartCache: RolloutStartCache, @unchecked Sendable {
    private let store: PostgresConfigStore

    public init(store: PostgresConfigStore) { self.store = store }

    public func cachedRolloutStart() throws -> (version: Int, start: Instant?)? {
        try store.reading {
            guard let r = try store.connection.query("SELECT version, started_at FROM monitor_rollout_start ORDER BY version DESC LIMIT 1").first,
                let v = r[0].flatMap({ Int($0) })
            else { return nil }
            return (v, r[1].flatMap { Int64($0) }.map(Instant.init(microseconds:)))
        }
    }

    public func cacheRolloutStart(version: Int, start: Instant?) throws {
        guard !store.isReadOnly else { return }
        try store.bestEffortSealed { try store.keepRolloutStart(version: version, start: start) }
    }

    /// Kept in the connection's next head-locked write (`PostgresConfigStore.transaction`), before its seal.
    public func cacheRolloutStartWithNextWrite(version: Int, start: Instant?) {
        guard !store.isReadOnly else { return }
        store.pendingRolloutStart.set((version, start))
    }
}

extension PostgresConfigStore {
    /// Writes the entry and drops the older ones: only the newest is ever read, and the table is sealed, so its
    /// rows are part of the state every write's seal is made of.
    func keepRolloutStart(version: Int, start: Instant?) throws {
        _ = try connection.query(
            "INSERT INTO monitor_rollout_start (version, started_at) VALUES ($1, $2) ON CONFLICT (version) DO UPDATE SET started_at = excluded.started_at",
            [String(version), start.map { String($0.microseconds) }])
        _ = try connection.query(
            "DELETE FROM monitor_rollout_start WHERE version < (SELECT max(version) FROM monitor_rollout_start)")
    }
}

extension PostgresConfigStore: MonitoredStore {
    public func monitoredConfig() throws -> any ConfigStore { self }

    /// A new reader of the telemetry tables on this connection; it keeps its fold between dashboard queries, so
    /// keep it as long as its reader (the monitor does).
    public func telemetryCounters() throws -> any TelemetryCounters { PostgresTelemetry(store: self) }
    public func guardrailSettingsStore() throws -> any GuardrailSettingsStore { PostgresGuardrailSettings(store: self) }
    public func simulationHeartbeat() throws -> any SimulationHeartbeat { PostgresHeartbeat(store: self) }
    public func rolloutStartCache() throws -> (any RolloutStartCache)? { PostgresRolloutStartCache(store: self) }

    /// A whole assessment under the connection's lock (one thread at a time).
    public func reading<T>(_ body: () throws -> T) throws -> T {
        try readingLocked(body)
    }
}
