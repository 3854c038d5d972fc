import CommandLineKit
import Console
import GoogleDataSources
import Monitoring
import Platform
import Telemetry
import TelemetrySources
import Timekeeping

/// The console's picture with the session's telemetry sources pulled on their schedule, as `watch`, `follow` and
/// `plan run` pull them: when a picture is drawn, every source whose interval has passed is pulled
/// (`SessionSources.pullDue`; none on a read-only session) on a thread of its own, so that a pull waiting on the
/// network never holds up the pictures (their refresh, the auto-kill they make); a later picture shows what it
/// landed. The picture says each source's state where it shows how fresh the data is: a silent or failing source
/// is the header's stale reason ("source X silent since …"), and each pull's freshness and quota is a notable event.
///
/// The configuration is read at most every `checkEvery` (the picture is drawn about four times a second), and one
/// round of pulls runs at a time.
final class SourcePullingConsoleSource: RolloutConsoleSource, @unchecked Sendable {
    let inner: any RolloutConsoleSource
    let sources: SessionSources
    let clock: any Clock
    let checkEvery: Instant.Duration
    private let lock = Lock()
    private var checkedAt: Instant?
    /// A round of pulls is running; another was asked for meanwhile (it runs when this one ends).
    private var pulling = false
    private var again = false
    /// The newest pull of each source, as the events show it.
    private var lastPulls: [String: NotableEvent] = [:]
    private var problem: String?
    /// What the configured sources are (`BigQuery`), to say where a figure they cannot give is missing from.
    private var sourceKinds: Set<String> = []

    init(inner: any RolloutConsoleSource, sources: SessionSources, clock: any Clock, checkEvery: Instant.Duration = .seconds(Int64(5))) {
        self.inner = inner
        self.sources = sources
        self.clock = clock
        self.checkEvery = checkEvery
    }

    func status() throws -> RolloutMonitor.Status { try inner.status() }

    func snapshot() throws -> ConsoleModel {
        try lock.withLock { try picture() }
    }

    /// Whether a round of pulls runs now (tests: wait for it before moving their clock).
    var isPulling: Bool { lock.withLock { pulling } }

    private func picture() throws -> ConsoleModel {
        let now = clock.now()
        if checkedAt.map({ now - $0 >= checkEvery }) ?? true {
            checkedAt = now
            if pulling {
                again = true
            } else {
                pulling = true
                detachThread { [self] in pullRounds() }
            }
        }
        var model = try inner.snapshot()
        // Aggregating sources send counters, never per-installation events: the store has no presence to count
        // distinct users per window from, so the windowed figure says which source cannot give it (not just a dash).
        if !sourceKinds.isEmpty, var w = model.crash.windowed, w.exposedUsers == 0, w.controlUsers == 0 {
            w.unavailable = "not available from " + sourceKinds.sorted().joined(separator: ", ")
            model.crash.windowed = w
        }
        if let problem, model.header.staleReason == nil { model.header.staleReason = problem }
        model.events = (lastPulls.values.sorted { ($0.at, $0.text) > ($1.at, $1.text) } + model.events)
        return model
    }

    /// Rounds until none was asked for meanwhile.
    private func pullRounds() {
        while true {
            pullDue(at: clock.now())
            let more = lock.withLock {
                defer { again = false }
                pulling = again
                return again
            }
            if !more { return }
        }
    }

    /// One round: the configuration, the pulls that are due, the sources' silences; kept for the next pictures.
    private func pullDue(at now: Instant) {
        var kinds: Set<String>?
        var pulls: [SourcePullReport] = []
        var problem: String?
        do {
            kinds = Set(try sources.configurations().map(\.kind.sourceName))
            pulls = try sources.pullDue()
            problem = try sources.silences().joined(separator: "; ")
        } catch {
            problem = "the sources cannot be pulled: \(error)"
        }
        lock.withLock {
            if let kinds { sourceKinds = kinds }
            for r in pulls { lastPulls[r.source] = Self.event(r, at: now) }
            self.problem = problem?.isEmpty == true ? nil : problem
        }
    }

    /// One pull as a notable event: how old its newest data is and the source's own figures (quota, bytes), or why
    /// it failed.
    static func event(_ r: SourcePullReport, at: Instant) -> NotableEvent {
        if let e = r.error { return NotableEvent(at: at, severity: .warning, text: "source \(r.source) failed: \(e.message)") }
        let age = r.dataAge.map { r.kind.dataAgeText($0) } ?? "no data in the window"
        let note = r.note.isEmpty ? "" : "; \(r.note)"
        return NotableEvent(at: at, severity: .info, text: "source \(r.source): \(age), \(r.addedEvents) events\(note)")
    }
}

extension SourceConfiguration.Kind {
    /// The service's name, as a sentence says where data comes from.
    var sourceName: String {
        switch self {
        case .bigQuery: "BigQuery"
        case .analyticsRealtime: "GA4 Realtime"
        case .crashlyticsAPI: "Crashlytics"
        }
    }
}

extension RolloutSession {
    /// The console's picture of this store with its telemetry sources pulled on their schedule (their credentials
    /// from `environment`).
    /// With `recordedAnswers` (a directory of `RecordedAnswers`), every source's calls are served from those
    /// answers (`rollout demo --source recorded`), its pictures checked every second.
    public func consoleSource(
        project: String? = nil, environment: [String: String], recordedAnswers: String? = nil
    ) throws -> any RolloutConsoleSource {
        let recorded = try recordedAnswers.map { (directory: String) throws -> RecordedAnswers in
            do { return try RecordedAnswers(directory: directory) } catch { throw CommandError("\(error)") }
        }
        return SourcePullingConsoleSource(
            inner: try consoleSource(project: project),
            sources: SessionSources(session: self, environment: environment, recorded: recorded), clock: clock,
            checkEvery: recorded == nil ? .seconds(Int64(5)) : .seconds(Int64(1)))
    }
}
