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
    public internal(set) var sessions: Int64
    var enteredAt: (Int64, Int64, Int64)
    var crashedAt: (Int64, Int64, Int64)
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
        sessions = 0
        enteredAt = (.max, .max, .max)
        crashedAt = (.max, .max, .max)
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
        switch cohort {
        case .none: if t < crashedAt.0 { crashedAt.0 = t }
        case .enabled: if t < crashedAt.1 { crashedAt.1 = t }
        case .control: if t < crashedAt.2 { crashedAt.2 = t }
        }
    }
}

/// Events gathered in memory until they land in the store as one transaction.
///
/// Memory grows with the distinct installations and minutes the batch touches, never with the number of
/// events: each event adds to one minute counter and updates its installation's `InstallationDelta`. The hot
/// path (`record(time:id:...)`) takes the installation id as bytes and allocates nothing for an installation
/// already seen in the batch. A batch belongs to one thread.
public final class TelemetryBatch {
    let counters = CountMap()
    let installations = InstallationTable()
    /// The member names of the line being read, for duplicate keys (reused by every line of the batch).
    public let memberNames = MemberNames()
    private var reasonIDs: [String: UInt16] = [:]
    /// Rejection reasons in the order first seen; a failure's local detail is `rejectedBase + index`.
    public private(set) var reasons: [String] = []
    public private(set) var eventCount = 0
    /// Keeps the loads of `record(_ block:)` from being optimised away.
    private var touched: UInt64 = 0
    private var earliestMicros = Int64.max
    private var latestMicros = Int64.min

    public init() {}

    /// The earliest and latest event times, nil while empty.
    public var earliest: Instant? { eventCount == 0 ? nil : Instant(microseconds: earliestMicros) }
    public var latest: Instant? { eventCount == 0 ? nil : Instant(microseconds: latestMicros) }
    public var installationCount: Int { installations.count }
    public var isEmpty: Bool { eventCount == 0 && counters.count == 0 }

    /// Forgets everything, keeping the allocated memory for the next batch.
    public func removeAll() {
        counters.removeAll()
        installations.removeAll()
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

    /// Records a block of parsed events, resolving their installations in stages (every slot, then every entry,
    /// then the updates) so that the cache misses of different events overlap instead of queueing.
    func record(_ block: UnsafeMutableBufferPointer<ParsedEvent>) {
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
    func record(
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
            if provider != .unspecified { d.pointee.provider = provider }
            if osMajor != 0 { d.pointee.osMajor = osMajor }
        } else {
            if d.pointee.provider == .unspecified { d.pointee.provider = provider }
            if d.pointee.osMajor == 0 { d.pointee.osMajor = osMajor }
        }
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
    }

    /// Adds `count` to one counter without any per-installation state: for sources that already aggregate
    /// (the fleet simulator's summaries, benchmarks that fill a store with a hundred million events).
    public func addCounts(_ key: CounterKey, at time: Instant, count: Int64) {
        counters.add(UInt64(bitPattern: BucketLevel.minute.bucket(time.microseconds)) << 32 | UInt64(key.packed), count)
        if key.kind != .usersEntered, key.kind != .usersCrashed { eventCount += Int(count) }
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
    /// is walked in order, page after page).
    public func forEachInstallation(_ body: (String, InstallationDelta) throws -> Void) rethrows {
        let table = installations
        let order = (0..<table.count).sorted { a, b in
            let x = table.id(a)
            let y = table.id(b)
            let c = memcmp(x.baseAddress!, y.baseAddress!, min(x.count, y.count))
            return c != 0 ? c < 0 : x.count < y.count
        }
        for i in order {
            try body(String(decoding: table.id(i), as: UTF8.self), table.entries[i])
        }
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
    func reasonID(bytes: UnsafeRawBufferPointer) -> UInt16 {
        for (i, r) in reasons.enumerated() where r.utf8.count == bytes.count {
            if r.utf8.elementsEqual(bytes) { return UInt16(i) }
        }
        return reasonID(String(decoding: bytes, as: UTF8.self))
    }
}

/// One native line, parsed, waiting in a block for `TelemetryBatch.record(_ block:)`; `id` points into the
/// line's bytes, so a block must be recorded before those bytes go away.
struct ParsedEvent {
    var time: Int64
    var id: UnsafePointer<UInt8>
    var idLength: Int
    var hash: UInt64
    var version: Int64
    var detail: UInt16
    var kind: CounterKind
    var cohort: Cohort
    var provider: AttestationProvider
    var osMajor: UInt8
}
