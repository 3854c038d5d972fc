import Foundation
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// The rollout as the console and `rollout status` see it: the config store's newest version and its rollout,
/// when the rollout started, and the telemetry since then with its verdict.
///
/// One monitor lives as long as its reader (a console session keeps one), so the sequential statistics are
/// folded once per settled minute however often the screen refreshes.
public final class RolloutMonitor {
    public let store: RolloutStore
    public let config: any ConfigStore
    public let telemetry: TelemetryTables
    public let clock: Clock
    public let names: RolloutNames

    /// The start found for the newest version seen, so history is scanned once per new version.
    private var startCache: (version: Int, start: Instant?)?

    /// `config` is the file's own config store unless given (a Firebase store keeps its templates elsewhere).
    public init(store: RolloutStore, config: (any ConfigStore)? = nil, clock: Clock, names: RolloutNames = .standard) throws {
        self.store = store
        self.clock = clock
        self.names = names
        self.config = try config ?? store.configStore()
        telemetry = try store.withDatabase { try TelemetryTables(database: $0) }
    }

    /// Everything the screen and `status` show, at one instant.
    public struct Status: Sendable {
        public var now: Instant
        public var current: StoredTemplate
        public var plan: RolloutPlan?
        /// When exposure last went from none to some (the first version of the current run of versions where the
        /// rollout was rolling or killed); nil when it has not started.
        public var startedAt: Instant?
        public var settings: GuardrailSettings
        public var snapshot: TelemetrySnapshot
        public var assessment: Assessment

        /// The exposed percentage (0 when killed or not started).
        public var exposed: MicroPercent {
            guard let plan, plan.state == .rolling else { return .zero }
            return plan.percentage
        }
    }

    public func status() throws -> Status {
        let now = clock.now()
        return try store.withDatabase { _ in
            let current = try config.current()
            let plan = try? RolloutPlan.locate(in: current.template, names: names)
            let start = try startedAt(current: current)
            let settings = try store.withDatabase { try GuardrailSettingsTable.load(from: $0) }
            let snapshot = try telemetry.snapshot(WatchConfiguration(since: start ?? now), now: now)
            let exposed = plan.flatMap { $0.state == .rolling ? $0.percentage.value : nil } ?? 0
            let context = RolloutContext(
                currentMicroPercent: exposed, newestTemplateVersion: Int64(current.info.number),
                guardrailsEnabled: settings.armedByHand, staleAfter: settings.staleAfter)
            return Status(
                now: now, current: current, plan: plan, startedAt: start, settings: settings, snapshot: snapshot,
                assessment: snapshot.assess(context))
        }
    }

    /// What the guardrail policy judges a proposal on.
    public func guardrailInput() throws -> GuardrailInput {
        let s = try status()
        return GuardrailInput(s.assessment, snapshot: s.snapshot, budget: s.settings.budget)
    }

    /// The guardrail as a write policy reading this monitor.
    public func guardrailPolicy() -> TelemetryGuardrail {
        nonisolated(unsafe) let monitor = self
        return TelemetryGuardrail(input: { _ in try monitor.guardrailInput() })
    }

    /// With auto-kill on, a HALT verdict while the rollout is exposing anyone publishes a kill through `path`
    /// (reason `guardrail: ...`); returns what was done, or nil when nothing was needed.
    public func autoKillIfHalted(using path: WritePath, actor: String = "guardrail (auto-kill)") throws -> WritePath.Outcome? {
        let s = try status()
        guard s.settings.autoKill, s.assessment.verdict.level == .halt, s.plan?.state == .rolling else { return nil }
        var request = WritePath.Request(
            intent: .rollout(.kill), actor: actor, reason: "guardrail: \(s.assessment.verdict.reason)", origin: "ROLLOUT_GUARDRAIL")
        request.basedOnETag = s.current.etag
        do {
            return try path.execute(request)
        } catch WritePath.Failure.conflict {
            // Someone published meanwhile; the next look decides again on the newer version.
            return nil
        }
    }

    private func startedAt(current: StoredTemplate) throws -> Instant? {
        if let cached = startCache, cached.version == current.info.number { return cached.start }
        if startCache == nil { startCache = try loadPersistedStart() }
        if let cached = startCache, cached.version == current.info.number { return cached.start }
        // Walk back from the newest version while the rollout was running; stop at a version where it was not,
        // or at the version already scanned, whose start carries over.
        var start: Instant?
        var before: Int? = nil
        scan: while true {
            let page = try config.versions(limit: 100, before: before)
            if page.isEmpty { break }
            for info in page {
                if let cached = startCache, info.number == cached.version {
                    if cached.start != nil { start = cached.start }
                    break scan
                }
                let template = info.number == current.info.number ? current.template : try config.version(info.number).template
                guard let plan = try? RolloutPlan.locate(in: template, names: names), plan.state != .notStarted else { break scan }
                start = info.updateTime
            }
            before = page.last!.number
        }
        startCache = (current.info.number, start)
        persistStart(version: current.info.number, start: start)
        return start
    }

    // The start is derived from the version history; it is kept in a small table so that a new reader (every
    // `rollout status`, every write) walks only the versions published since the last one was computed.
    private static let startTable = "CREATE TABLE IF NOT EXISTS monitor_rollout_start (version INTEGER PRIMARY KEY, started_at INTEGER)"

    private func loadPersistedStart() throws -> (version: Int, start: Instant?)? {
        try store.withDatabase { db in
            let exists = try db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'monitor_rollout_start'")
            guard !exists.isEmpty,
                let row = try db.query("SELECT version, started_at FROM monitor_rollout_start ORDER BY version DESC LIMIT 1").first,
                let version = row[0].int
            else { return nil }
            return (Int(version), row[1].int.map { Instant(microseconds: $0) })
        }
    }

    /// Best effort: a busy or read-only store just means the next reader walks a little more history.
    private func persistStart(version: Int, start: Instant?) {
        try? store.withDatabase { db in
            try db.execute(RolloutMonitor.startTable)
            try db.run(
                "INSERT OR REPLACE INTO monitor_rollout_start (version, started_at) VALUES (?, ?)",
                [.integer(Int64(version)), start.map { .integer($0.microseconds) } ?? .null])
        }
    }
}
