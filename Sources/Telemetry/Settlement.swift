import Rollout
import Timekeeping

/// The compact state the store keeps per installation: what user-level rates, activity and propagation need.
///
/// Its size does not depend on how many events the installation sent.
public struct InstallationRecord: Hashable, Sendable {
    public var firstSeen: Int64
    public var lastSeen: Int64
    /// The cohort, provider and OS major version of the latest event.
    public var cohort: Cohort
    public var provider: AttestationProvider
    public var osMajor: UInt8
    public var sessions: Int64
    /// Bit `cohort.code` set: the installation has reported this cohort.
    public var enteredCohorts: UInt8
    /// Bit `cohort.code` set: the installation had a fatal crash while reporting this cohort.
    public var crashedCohorts: UInt8
    /// The latest config fetch, if any.
    public var fetchedAt: Int64?
    public var templateVersion: Int64?
    /// The latest fatal crash, if any (recorded from this field's introduction on: an installation stored before
    /// it has nil until its next fatal crash).
    public var lastCrashAt: Int64?

    public init(
        firstSeen: Int64, lastSeen: Int64, cohort: Cohort, provider: AttestationProvider, osMajor: UInt8,
        sessions: Int64, enteredCohorts: UInt8, crashedCohorts: UInt8, fetchedAt: Int64?, templateVersion: Int64?,
        lastCrashAt: Int64? = nil
    ) {
        self.lastCrashAt = lastCrashAt
        self.firstSeen = firstSeen
        self.lastSeen = lastSeen
        self.cohort = cohort
        self.provider = provider
        self.osMajor = osMajor
        self.sessions = sessions
        self.enteredCohorts = enteredCohorts
        self.crashedCohorts = crashedCohorts
        self.fetchedAt = fetchedAt
        self.templateVersion = templateVersion
    }

    /// Whether the device can run App Attest: iOS 14 or later (an unknown OS counts as able, so that load
    /// predictions err high) and not a simulator (debug provider).
    public var canAttest: Bool { (osMajor == 0 || osMajor >= 14) && provider != .debug }

    var activityMark: (hour: Int64, key: PresenceKey) {
        (BucketLevel.hour.bucket(lastSeen), .active(cohort, eligible: canAttest))
    }

    /// The hour of the latest fatal crash, under the latest cohort like `activityMark`: a user counted as crashed in
    /// a window is then also counted as active in it, in the same arm (the crash is an event, so `lastSeen` is at
    /// or after it), and a window's crash-free share per arm is a proper share.
    var crashMark: (hour: Int64, key: PresenceKey)? {
        guard let lastCrashAt else { return nil }
        return (BucketLevel.hour.bucket(lastCrashAt), .crashed(cohort))
    }

    var fetchMark: (hour: Int64, key: PresenceKey)? {
        guard let fetchedAt, let templateVersion else { return nil }
        return (BucketLevel.hour.bucket(fetchedAt), .fetched(templateVersion: templateVersion))
    }
}

/// One stored counter row.
public struct CounterRow: Hashable, Sendable {
    public var level: BucketLevel
    public var bucket: Int64
    public var key: CounterKey
    public var count: Int64
    public init(level: BucketLevel, bucket: Int64, key: CounterKey, count: Int64) {
        self.level = level
        self.bucket = bucket
        self.key = key
        self.count = count
    }
}

/// One stored presence row: how the number of installations whose latest mark falls in `hour` changes.
public struct PresenceRow: Hashable, Sendable {
    public var hour: Int64
    public var key: PresenceKey
    public var delta: Int64
    public init(hour: Int64, key: PresenceKey, delta: Int64) {
        self.hour = hour
        self.key = key
        self.delta = delta
    }
}

/// Turns a batch and the stored state of its installations into the rows to write, as pure arithmetic.
///
/// The store calls `settle` once per distinct installation of the batch (with the stored record, or nil),
/// writes each returned record, then writes `counterRows()` and `presenceRows()`, all in one transaction.
/// A fresh settlement is made for each attempt, so a retried transaction never counts twice.
public struct BatchSettlement {
    public let batch: TelemetryBatch
    private let reasonCodes: [UInt16]
    private let retention: TelemetryRetention
    /// The newest event time after this batch lands (drives retention).
    public let newest: Int64
    private var transitions: [UInt64: Int64] = [:]
    private var presence: [PresenceRow.Key: Int64] = [:]
    private let oldestPresenceHour: Int64

    /// - Parameters:
    ///   - reasonCodes: the store's catalog id of each of `batch.reasons`, in order.
    ///   - storedNewest: the newest event time already in the store.
    public init(batch: TelemetryBatch, reasonCodes: [UInt16], retention: TelemetryRetention, storedNewest: Int64?) {
        precondition(reasonCodes.count == batch.reasons.count, "one catalog code per reason")
        self.batch = batch
        self.reasonCodes = reasonCodes
        self.retention = retention
        newest = max(storedNewest ?? .min, batch.latest?.microseconds ?? .min)
        oldestPresenceHour = BucketLevel.hour.bucket(newest - TelemetryRetention.presenceWindow.microseconds)
    }

    /// Merges the batch's view of one installation into its stored record and notes the transitions.
    public mutating func settle(_ d: InstallationDelta, previous: InstallationRecord?) -> InstallationRecord {
        var r =
            previous
            ?? InstallationRecord(
                firstSeen: d.firstSeen, lastSeen: d.lastSeen, cohort: d.cohort, provider: d.provider,
                osMajor: d.osMajor, sessions: 0, enteredCohorts: 0, crashedCohorts: 0, fetchedAt: nil,
                templateVersion: nil)
        r.firstSeen = min(r.firstSeen, d.firstSeen)
        if previous == nil || d.lastSeen >= r.lastSeen {
            r.lastSeen = d.lastSeen
            r.cohort = d.cohort
            if d.provider != .unspecified { r.provider = d.provider }
            if d.osMajor != 0 { r.osMajor = d.osMajor }
        } else {
            if r.provider == .unspecified { r.provider = d.provider }
            if r.osMajor == 0 { r.osMajor = d.osMajor }
        }
        r.sessions += d.sessions
        for cohort in Cohort.allCases {
            let bit = UInt8(1) << cohort.code
            if let t = d.entered(cohort), r.enteredCohorts & bit == 0 {
                r.enteredCohorts |= bit
                note(.usersEntered, cohort, t)
            }
            if let t = d.crashed(cohort), r.crashedCohorts & bit == 0 {
                r.crashedCohorts |= bit
                note(.usersCrashed, cohort, t)
            }
        }
        if let t = d.latestFatalCrash, t > (r.lastCrashAt ?? .min) { r.lastCrashAt = t }
        if d.fetchedAt != .min, d.fetchedAt >= (r.fetchedAt ?? .min) {
            r.fetchedAt = d.fetchedAt
            r.templateVersion = d.templateVersion
        }
        move(from: previous?.activityMark, to: r.activityMark)
        move(from: previous?.fetchMark, to: r.fetchMark)
        move(from: previous?.crashMark, to: r.crashMark)
        return r
    }

    private mutating func note(_ kind: CounterKind, _ cohort: Cohort, _ t: Int64) {
        let key = CounterKey(kind, cohort)
        transitions[UInt64(bitPattern: BucketLevel.minute.bucket(t)) << 32 | UInt64(key.packed), default: 0] += 1
    }

    private mutating func move(from old: (hour: Int64, key: PresenceKey)?, to new: (hour: Int64, key: PresenceKey)?) {
        if let old, let new, old.hour == new.hour, old.key == new.key { return }
        if let old, old.hour >= oldestPresenceHour {
            presence[PresenceRow.Key(hour: old.hour, key: old.key), default: 0] -= 1
        }
        if let new, new.hour >= oldestPresenceHour {
            presence[PresenceRow.Key(hour: new.hour, key: new.key), default: 0] += 1
        }
    }

    /// Every counter row to add, at every level, with reason ids mapped to the catalog; rows older than the
    /// retention of their level are left out.
    public func counterRows() -> [CounterRow] {
        var byLevel: [BucketLevel: [UInt64: Int64]] = [:]
        let oldest = BucketLevel.allCases.map { retention.oldestKept($0, newest: newest) }
        func add(_ minute: Int64, _ key: CounterKey, _ count: Int64) {
            var key = key
            if key.kind == .attestationFailure, let local = FailureDetail(code: key.detail).reasonID {
                key.detail = FailureDetail.rejectedBase + reasonCodes[Int(local)]
            }
            for level in BucketLevel.allCases {
                let bucket = level == .minute ? minute : floorDivide(minute, BucketLevel.minute.count(in: level))
                if let o = oldest[Int(level.rawValue)], bucket < o { continue }
                byLevel[level, default: [:]][UInt64(bitPattern: bucket) << 32 | UInt64(key.packed), default: 0] += count
            }
        }
        batch.forEachCounter(add)
        for (k, v) in transitions {
            add(Int64(bitPattern: k) >> 32, CounterKey(packed: UInt32(truncatingIfNeeded: k))!, v)
        }
        var rows: [CounterRow] = []
        for (level, map) in byLevel {
            for (k, v) in map where v != 0 {
                rows.append(
                    CounterRow(
                        level: level, bucket: Int64(bitPattern: k) >> 32,
                        key: CounterKey(packed: UInt32(truncatingIfNeeded: k))!, count: v))
            }
        }
        return rows
    }

    /// Every presence change of the batch.
    public func presenceRows() -> [PresenceRow] {
        presence.compactMap { $0.value == 0 ? nil : PresenceRow(hour: $0.key.hour, key: $0.key.key, delta: $0.value) }
    }
}

extension PresenceRow {
    struct Key: Hashable {
        var hour: Int64
        var key: PresenceKey
    }
}

extension TelemetryRetention {
    /// Presence rows older than this are dropped: no activity window looks further back.
    public static let presenceWindow: Instant.Duration = .days(8)
}

@inline(__always)
func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b < 0) ? q - 1 : q
}
