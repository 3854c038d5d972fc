import Rollout
import Timekeeping

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What one batch of events says about one installation, merged over all its events in the batch.
///
/// Times are microseconds since the epoch; `Int64.max` means "never" for the per-cohort first times and
/// `Int64.min` for `fetchedAt`.
public struct InstallationDelta: Sendable {
    var idOffset: Int
    var idLength: Int32
    var hash: UInt64
    public internal(set) var firstSeen: Int64
    public internal(set) var lastSeen: Int64
    /// The cohort, provider and OS major version of the latest event (provider and OS only when reported).
    public internal(set) var cohort: Cohort
    public internal(set) var provider: AttestationProvider
    public internal(set) var osMajor: UInt8
    /// The provider and OS of the first event that reported one (what `provider` and `osMajor` are while no
    /// event at or after the latest time so far reported one), and the times of the last such latest events
    /// (`Int64.min`: none): what `merge(_:)` needs to join two deltas exactly as if their events were recorded
    /// one after the other.
    var firstProvider: AttestationProvider
    var firstOSMajor: UInt8
    var providerAt: Int64
    var osMajorAt: Int64
    public internal(set) var sessions: Int64
    var enteredAt: (Int64, Int64, Int64)
    var crashedAt: (Int64, Int64, Int64)
    /// The latest fatal crash in the batch, any cohort (`Int64.min`: none): the installation's crash mark
    /// (`PresenceKey.crashed`), so that distinct crashed users in a recent window are a sum of presence rows.
    var lastCrashAt: Int64
    public internal(set) var fetchedAt: Int64
    public internal(set) var templateVersion: Int64

    init(idOffset: Int, idLength: Int32, hash: UInt64, time: Int64, cohort: Cohort) {
        self.idOffset = idOffset
        self.idLength = idLength
        self.hash = hash
        firstSeen = time
        lastSeen = time
        self.cohort = cohort
        provider = .unspecified
        osMajor = 0
        firstProvider = .unspecified
        firstOSMajor = 0
        providerAt = .min
        osMajorAt = .min
        sessions = 0
        enteredAt = (.max, .max, .max)
        crashedAt = (.max, .max, .max)
        lastCrashAt = .min
        fetchedAt = .min
        templateVersion = 0
    }

    /// The first time in the batch this installation reported `cohort`.
    public func entered(_ cohort: Cohort) -> Int64? {
        let t =
            switch cohort {
            case .none: enteredAt.0
            case .enabled: enteredAt.1
            case .control: enteredAt.2
            }
        return t == .max ? nil : t
    }

    /// The first fatal crash in the batch while reporting `cohort`.
    public func crashed(_ cohort: Cohort) -> Int64? {
        let t =
            switch cohort {
            case .none: crashedAt.0
            case .enabled: crashedAt.1
            case .control: crashedAt.2
            }
        return t == .max ? nil : t
    }

    /// The latest fatal crash in the batch, nil without one.
    public var latestFatalCrash: Int64? { lastCrashAt == .min ? nil : lastCrashAt }

    /// Joins `later`, the delta of events recorded after this one's, so that the result is what one delta of
    /// all those events in that order would be (every field, field by field).
    ///
    /// The latest-event fields follow `TelemetryBatch.record`: an event at or after the latest time so far sets the
    /// cohort, and the provider and OS when it reports them; an earlier one only fills a provider or OS still
    /// unknown. So the provider is the one of the last such "latest" event that reported one, else the first
    /// reported at all; `later`'s "latest" events stay latest after this delta's exactly when they are at or
    /// after its `lastSeen`.
    mutating func merge(_ later: InstallationDelta) {
        if later.firstSeen < firstSeen { firstSeen = later.firstSeen }
        if later.providerAt != .min, later.providerAt >= lastSeen {
            provider = later.provider
            providerAt = later.providerAt
        } else if provider == .unspecified {
            provider = later.firstProvider
        }
        if later.osMajorAt != .min, later.osMajorAt >= lastSeen {
            osMajor = later.osMajor
            osMajorAt = later.osMajorAt
        } else if osMajor == 0 {
            osMajor = later.firstOSMajor
        }
        if firstProvider == .unspecified { firstProvider = later.firstProvider }
        if firstOSMajor == 0 { firstOSMajor = later.firstOSMajor }
        if later.lastSeen >= lastSeen {
            lastSeen = later.lastSeen
            cohort = later.cohort
        }
        sessions += later.sessions
        enteredAt = (
            min(enteredAt.0, later.enteredAt.0), min(enteredAt.1, later.enteredAt.1),
            min(enteredAt.2, later.enteredAt.2)
        )
        crashedAt = (
            min(crashedAt.0, later.crashedAt.0), min(crashedAt.1, later.crashedAt.1),
            min(crashedAt.2, later.crashedAt.2)
        )
        if later.lastCrashAt > lastCrashAt { lastCrashAt = later.lastCrashAt }
        if later.fetchedAt >= fetchedAt {
            fetchedAt = later.fetchedAt
            templateVersion = later.templateVersion
        }
    }

    @inline(__always)
    mutating func noteEntered(_ cohort: Cohort, _ t: Int64) {
        switch cohort {
        case .none: if t < enteredAt.0 { enteredAt.0 = t }
        case .enabled: if t < enteredAt.1 { enteredAt.1 = t }
        case .control: if t < enteredAt.2 { enteredAt.2 = t }
        }
    }

    @inline(__always)
    mutating func noteCrashed(_ cohort: Cohort, _ t: Int64) {
        if t > lastCrashAt { lastCrashAt = t }
        switch cohort {
        case .none: if t < crashedAt.0 { crashedAt.0 = t }
        case .enabled: if t < crashedAt.1 { crashedAt.1 = t }
        case .control: if t < crashedAt.2 { crashedAt.2 = t }
        }
    }
}

/// Events gathered until they land in the store as one transaction.
///
/// Memory grows with the minutes the batch touches and with at most twice `spillLimit` installations, never
/// with the number of events nor with the distinct installations beyond that: each event adds to one minute
/// counter and updates its installation's `InstallationDelta`; when the table of installations reaches
/// `spillLimit`, it is written, sorted by id, as a run to a `SpillFile` of `spillFiles` (an ingest's batch:
/// an unnamed temporary file, see `TelemetryIngest`) on a thread of its own, while events go on into a second
/// table.
/// `forEachInstallation` merges the runs and the table in id order, joining the deltas of one installation in
/// the order their events came (`InstallationDelta.merge`), so the store sees exactly what one table of every
/// installation would have given. If a run cannot be written (no space for temporary files, or no `spillFiles`),
/// the batch stops spilling and keeps its installations in memory.
///
/// The hot path (`record(time:id:...)`) takes the installation id as bytes and allocates nothing for an
/// installation already in the table. A batch belongs to one thread.
public final class TelemetryBatch {
    let counters = CountMap()
    /// The table events are recorded into.
    private(set) var installations = InstallationTable()
    /// How many installations the in-memory table holds before it is spilled as a sorted run (about 140 bytes
    /// each, plus the id).
    public var spillLimit = TelemetryBatch.defaultSpillLimit {
        didSet {
            installations.reserve = spillLimit <= Self.defaultSpillLimit ? spillLimit : 0
            spare?.reserve = installations.reserve
        }
    }
    /// 512Ki installations: two tables (the one being recorded into and the one being spilled) take about 170 MB
    /// at most (136-byte deltas, their slots and ids), within `ingest`'s 300 MB.
    public static let defaultSpillLimit = 1 << 19
    private var runs: [SpillRun] = []
    /// The table whose run could not be written (no space for temporary files), kept whole: a merge source after
    /// the runs (no spill follows a failed one).
    private var unspilled: InstallationTable?
    /// The spill under way on a thread of its own, and the emptied table it gives back for the next spill.
    private var spilling: SpillJob?
    private var spare: InstallationTable?
    /// Where spilled runs are written; nil (a batch made outside an ingest): a spill fails, and the batch keeps
    /// its installations in memory.
    package var spillFiles: (@Sendable () -> (any SpillFile)?)?
    /// Makes every spill from now on fail as if no temporary file could be written (a test hook).
    package var spillsFail = false
    /// The distinct installations found by the last merge, and the event count it was made at.
    private var merged: (installations: Int, events: Int)?
    private var reasonIDs: [String: UInt16] = [:]
    /// Rejection reasons in the order first seen; a failure's local detail is `rejectedBase + index`.
    public private(set) var reasons: [String] = []
    public private(set) var eventCount = 0
    /// Keeps the loads of `record(_ block:)` from being optimised away.
    private var touched: UInt64 = 0
    private var earliestMicros = Int64.max
    private var latestMicros = Int64.min

    public init() { installations.reserve = spillLimit }

    deinit { finishSpill() }

    /// The earliest and latest event times, nil while empty.
    public var earliest: Instant? { eventCount == 0 ? nil : Instant(microseconds: earliestMicros) }
    public var latest: Instant? { eventCount == 0 ? nil : Instant(microseconds: latestMicros) }
    /// The distinct installations of the batch. Once runs were spilled this merges them (reading them back) unless
    /// `forEachInstallation` just did; `installationBound` is the cheap upper bound.
    public var installationCount: Int {
        finishSpill()
        if runs.isEmpty && unspilled == nil { return installations.count }
        if let merged, merged.events == eventCount { return merged.installations }
        return (try? mergeRuns { _, _ in }) ?? installationBound
    }
    /// At least `installationCount`: the installations of the table plus those of every spilled run.
    public var installationBound: Int {
        finishSpill()
        return runs.reduce(installations.count + (unspilled?.count ?? 0)) { $0 + $1.count }
    }
    /// How many sorted runs of installations were spilled to temporary files (a test hook).
    public var spilledRuns: Int {
        finishSpill()
        return runs.count
    }
    public var isEmpty: Bool { eventCount == 0 && counters.count == 0 }

    /// Forgets everything, keeping the allocated memory for the next batch.
    public func removeAll() {
        finishSpill()
        counters.removeAll()
        installations.removeAll()
        runs.removeAll()
        unspilled = nil
        merged = nil
        reasonIDs.removeAll(keepingCapacity: true)
        reasons.removeAll(keepingCapacity: true)
        eventCount = 0
        earliestMicros = .max
        latestMicros = .min
    }

    /// Records one event.
    public func record(_ event: TelemetryEvent) {
        var detail: UInt16 = 0
        var version: Int64 = 0
        let kind: CounterKind
        switch event.kind {
        case .attestationSuccess: kind = .attestationSuccess
        case .attestationFailure(let c):
            kind = .attestationFailure
            detail = failureDetail(c)
        case .crash(let fatal):
            kind = .crash
            detail = fatal ? 1 : 0
        case .sessionStart: kind = .session
        case .configFetch(let v):
            kind = .configFetch
            version = v
        }
        var id = event.installationID
        id.withUTF8 { bytes in
            record(
                time: event.time.microseconds, id: UnsafeRawBufferPointer(bytes), kind: kind, cohort: event.cohort,
                provider: event.provider, detail: detail, osMajor: osMajorVersion(event.osVersion),
                templateVersion: version)
        }
    }

    /// The local detail code of a failure class (rejection reasons get batch-local ids; the store maps them to
    /// its catalog when the batch lands).
    public func failureDetail(_ errorClass: AttestationErrorClass) -> UInt16 {
        if case .rejected(let reason) = errorClass { return FailureDetail.rejectedBase + reasonID(reason) }
        return UInt16(errorClass.dcErrorCode!)
    }

    func reasonID(_ reason: String) -> UInt16 {
        if let id = reasonIDs[reason] { return id }
        let id = UInt16(reasons.count)
        reasonIDs[reason] = id
        reasons.append(reason)
        return id
    }

    /// The hot path: one event with its installation id as bytes (copied only the first time it is seen).
    ///
    /// `detail` is the failure's local detail code (`failureDetail`) or 1 for a fatal crash; `templateVersion`
    /// matters only for config fetches.
    @inline(__always)
    public func record(
        time: Int64, id: UnsafeRawBufferPointer, kind: CounterKind, cohort: Cohort, provider: AttestationProvider,
        detail: UInt16, osMajor: UInt8, templateVersion: Int64
    ) {
        record(
            time: time, id: id, hash: installations.hash(id.baseAddress!, id.count), kind: kind, cohort: cohort,
            provider: provider,
            detail: detail, osMajor: osMajor, templateVersion: templateVersion)
    }

    /// Records a block of parsed events, resolving their installations in stages (every id's hash, then every
    /// slot, then every entry, then the updates) so that the cache misses of different events overlap instead of
    /// queueing. The hashes are computed here, on the thread that records (`BlockRecorder`), not by the parser.
    package func record(_ block: UnsafeMutableBufferPointer<ParsedEvent>) {
        for i in block.indices { block[i].hash = installations.hash(block[i].id, block[i].idLength) }
        var sink: UInt64 = 0
        for e in block { sink ^= installations.touch(e.hash) }
        touched ^= sink
        for e in block {
            record(
                time: e.time, id: UnsafeRawBufferPointer(start: e.id, count: e.idLength), hash: e.hash, kind: e.kind,
                cohort: e.cohort, provider: e.provider, detail: e.detail, osMajor: e.osMajor, templateVersion: e.version
            )
        }
    }

    @inline(__always)
    package func record(
        time: Int64, id: UnsafeRawBufferPointer, hash: UInt64, kind: CounterKind, cohort: Cohort,
        provider: AttestationProvider,
        detail: UInt16, osMajor: UInt8, templateVersion: Int64
    ) {
        let key = CounterKey(kind, cohort, provider: provider, detail: detail)
        counters.add(UInt64(bitPattern: BucketLevel.minute.bucket(time)) << 32 | UInt64(key.packed), 1)
        eventCount += 1
        if time < earliestMicros { earliestMicros = time }
        if time > latestMicros { latestMicros = time }
        let i = installations.index(of: id, hash: hash) {
            InstallationDelta(idOffset: $0, idLength: $1, hash: $2, time: time, cohort: cohort)
        }
        let d = installations.entries + i
        if time < d.pointee.firstSeen { d.pointee.firstSeen = time }
        if time >= d.pointee.lastSeen {
            d.pointee.lastSeen = time
            d.pointee.cohort = cohort
            if provider != .unspecified {
                d.pointee.provider = provider
                d.pointee.providerAt = time
            }
            if osMajor != 0 {
                d.pointee.osMajor = osMajor
                d.pointee.osMajorAt = time
            }
        } else {
            if d.pointee.provider == .unspecified { d.pointee.provider = provider }
            if d.pointee.osMajor == 0 { d.pointee.osMajor = osMajor }
        }
        if d.pointee.firstProvider == .unspecified { d.pointee.firstProvider = provider }
        if d.pointee.firstOSMajor == 0 { d.pointee.firstOSMajor = osMajor }
        d.pointee.noteEntered(cohort, time)
        switch kind {
        case .session: d.pointee.sessions += 1
        case .crash: if detail == 1 { d.pointee.noteCrashed(cohort, time) }
        case .configFetch:
            if time >= d.pointee.fetchedAt {
                d.pointee.fetchedAt = time
                d.pointee.templateVersion = templateVersion
            }
        default: break
        }
        if installations.count >= spillLimit, unspilled == nil { spill() }
    }

    /// Hands the full table to a thread that writes it, sorted by id, as a run to a temporary file, and goes on
    /// recording into an empty one (the previous spill's table, once that spill is done): sorting and writing a
    /// run then overlaps with recording the next events instead of stopping them. Without a thread the run is
    /// written here.
    private func spill() {
        finishSpill()
        guard unspilled == nil else { return }
        let full = installations
        let next = spare ?? InstallationTable()
        next.reserve = full.reserve
        spare = nil
        installations = next
        let job = SpillJob(table: full, makeFile: spillFiles ?? { nil }, failing: spillsFail)
        if !job.start() { job.run() }
        spilling = job
    }

    /// Waits for the spill under way, if any, and takes its run (or, if it could not be written, its table).
    private func finishSpill() {
        guard let job = spilling else { return }
        spilling = nil
        job.join()
        if let run = job.result {
            runs.append(run)
            job.table.removeAll()
            spare = job.table
        } else {
            unspilled = job.table  // whole in memory, a source of the merge in its run's place; spilling stops
        }
    }

    /// Adds `count` to one counter without any per-installation state: for sources that already aggregate
    /// (the fleet simulator's summaries, benchmarks that fill a store with a hundred million events).
    public func addCounts(_ key: CounterKey, at time: Instant, count: Int64) {
        counters.add(UInt64(bitPattern: BucketLevel.minute.bucket(time.microseconds)) << 32 | UInt64(key.packed), count)
        if key.kind != .usersEntered, key.kind != .usersCrashed {
            // Saturating: counts from outside (a source's answer) must not trap the process.
            let (sum, overflow) = eventCount.addingReportingOverflow(Int(count))
            eventCount = overflow ? (count > 0 ? .max : .min) : sum
        }
        if time.microseconds < earliestMicros { earliestMicros = time.microseconds }
        if time.microseconds > latestMicros { latestMicros = time.microseconds }
    }

    /// Every minute counter: (minute index, key with local reason ids, count).
    public func forEachCounter(_ body: (Int64, CounterKey, Int64) throws -> Void) rethrows {
        try counters.forEach { k, v in
            if let key = CounterKey(packed: UInt32(truncatingIfNeeded: k)) {
                try body(Int64(bitPattern: k) >> 32, key, v)
            }
        }
    }

    /// Every installation of the batch with its id, in byte order of the ids (so that a B-tree keyed by id
    /// is walked in order, page after page). With spilled runs, they are merged with the table; reading a run
    /// back can fail (`SpillError`).
    public func forEachInstallation(_ body: (String, InstallationDelta) throws -> Void) throws {
        try forEachInstallationID { id, delta in try body(String(decoding: id, as: UTF8.self), delta) }
    }

    /// `forEachInstallation` with each id as its UTF-8 bytes, valid only during the call (no `String` made).
    ///
    /// With spilled runs, the merge runs on a second thread a few thousand installations ahead of `body`
    /// (`MergeAhead`), so that reading and decoding the runs overlaps with what `body` does (the store's writes).
    public func forEachInstallationID(_ body: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) throws {
        finishSpill()
        if runs.isEmpty && unspilled == nil {
            let table = installations
            for i in table.sortedOrder() { try body(table.id(Int(i)), table.entries[Int(i)]) }
            return
        }
        final class Unchecked: @unchecked Sendable {
            let batch: TelemetryBatch
            init(_ batch: TelemetryBatch) { self.batch = batch }
        }
        let me = Unchecked(self)
        // The merging thread reads the runs and the table; nothing else touches the batch until it is joined.
        if let ahead = MergeAhead(merge: { emit in try me.batch.mergeRuns(emit) }) {
            merged = (try ahead.consume(body), eventCount)
        } else {
            merged = (try mergeRuns(body), eventCount)
        }
    }

    /// The k-way merge of the runs (oldest first) and the table (newest): each id once, with its deltas joined
    /// in that order. Returns the number of distinct installations.
    private func mergeRuns(_ body: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) throws -> Int {
        // The runs, the table that could not be spilled (if any), then the table: the order they were filled in.
        var sources: [MergeSource] = []
        for run in runs { sources.append(try MergeSource(run: run, position: sources.count)) }
        if let unspilled { sources.append(MergeSource(table: unspilled, position: sources.count)) }
        sources.append(MergeSource(table: installations, position: sources.count))
        var heap = MergeHeap(sources)
        for i in sources.indices where sources[i].valid { heap.push(i) }
        var distinct = 0
        while let i = heap.pop() {
            let first = sources[i]
            var delta = first.delta
            let id = UnsafeRawBufferPointer(start: first.id, count: first.idLength)
            // The same id in later sources comes out next, in source order (the heap breaks ties by it).
            while let j = heap.top, sources[j].idEquals(first) {
                _ = heap.pop()
                let next = sources[j]
                delta.merge(next.delta)
                try next.advance()
                if next.valid { heap.push(j) }
            }
            distinct += 1
            try body(id, delta)
            try first.advance()
            if first.valid { heap.push(i) }
        }
        return distinct
    }

    /// Events per kind and cohort (crashes split fatal / non-fatal by `detail`), for summaries and tests.
    public func eventTotals() -> [CounterKey: Int64] {
        var totals: [CounterKey: Int64] = [:]
        forEachCounter { _, key, count in
            guard key.kind != .usersEntered, key.kind != .usersCrashed else { return }
            totals[key, default: 0] += count
        }
        return totals
    }
}

extension TelemetryBatch {
    /// `reasonID(_:)` for a reason given as bytes, without allocating once the reason is known.
    package func reasonID(bytes: UnsafeRawBufferPointer) -> UInt16 {
        for (i, r) in reasons.enumerated() where r.utf8.count == bytes.count {
            if r.utf8.elementsEqual(bytes) { return UInt16(i) }
        }
        return reasonID(String(decoding: bytes, as: UTF8.self))
    }
}

/// One native line, parsed, waiting in a block for `TelemetryBatch.record(_ block:)`; `id` points into the
/// line's bytes or an `EventBlock`'s copy of them, so a block must be recorded before those bytes go away.
/// `hash` is filled in by `record(_ block:)`.
package struct ParsedEvent {
    package var time: Int64
    package var id: UnsafePointer<UInt8>
    package var idLength: Int
    package var hash: UInt64
    package var version: Int64
    package var detail: UInt16
    package var kind: CounterKind
    package var cohort: Cohort
    package var provider: AttestationProvider
    package var osMajor: UInt8

    package init(
        time: Int64, id: UnsafePointer<UInt8>, idLength: Int, hash: UInt64, version: Int64, detail: UInt16,
        kind: CounterKind, cohort: Cohort, provider: AttestationProvider, osMajor: UInt8
    ) {
        self.time = time
        self.id = id
        self.idLength = idLength
        self.hash = hash
        self.version = version
        self.detail = detail
        self.kind = kind
        self.cohort = cohort
        self.provider = provider
        self.osMajor = osMajor
    }
}

/// A binary min-heap of merge sources (their indices in `sources`, which are their positions) by
/// `MergeSource.precedes`. Each item carries its source's key (`MergeSource.key`), so that comparing two items
/// reads neither source unless their keys tie.
struct MergeHeap {
    private struct Item {
        var high: UInt64
        var low: UInt64
        var source: Int
    }
    private let sources: [MergeSource]
    private var items: [Item] = []

    init(_ sources: [MergeSource]) {
        self.sources = sources
        items.reserveCapacity(sources.count)
    }

    var top: Int? { items.first?.source }

    @inline(__always)
    private func precedes(_ a: Item, _ b: Item) -> Bool {
        if a.high != b.high { return a.high < b.high }
        if a.low != b.low { return a.low < b.low }
        return sources[a.source].precedes(sources[b.source])
    }

    /// Adds source `index` at its current id.
    mutating func push(_ index: Int) {
        let key = sources[index].key
        items.append(Item(high: key.high, low: key.low, source: index))
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard precedes(items[i], items[parent]) else { break }
            items.swapAt(i, parent)
            i = parent
        }
    }

    mutating func pop() -> Int? {
        guard !items.isEmpty else { return nil }
        let first = items[0].source
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1
                let r = l + 1
                var m = i
                if l < items.count, precedes(items[l], items[m]) { m = l }
                if r < items.count, precedes(items[r], items[m]) { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return first
    }
}
