import Crypto
import JSON
import Timekeeping

/// What happened, as the audit log records it (before the store numbers and chains it).
public struct AuditEntry: Hashable, Sendable {
    public enum Result: String, Hashable, Sendable, CaseIterable {
        case published
        case refusedByPolicy = "refused by policy"
        case conflict
        case refusedReadOnly = "refused: read-only"
        case stepUpAccepted = "step-up accepted"
        case stepUpRefused = "step-up refused"
        case recorded
    }

    public var time: Instant
    public var actor: String
    /// `set`, `nudge`, `kill`, `resume`, `rollback`, `import`, `init`, `operator enroll`, `policy set`, ...
    public var action: String
    public var from: String
    public var to: String
    public var reason: String
    public var result: Result
    /// The version produced (publishes only; filled in by the store).
    public var version: Int?
    /// Extra facts (`forced`, `guardrail override`, which policy refused and why). Never secrets.
    public var detail: String

    public init(
        time: Instant, actor: String, action: String, from: String = "", to: String = "", reason: String = "",
        result: Result, version: Int? = nil, detail: String = ""
    ) {
        self.time = time
        self.actor = actor
        self.action = action
        self.from = from
        self.to = to
        self.reason = reason
        self.result = result
        self.version = version
        self.detail = detail
    }
}

/// An audit entry as stored: numbered and chained to its predecessor by SHA-256.
public struct AuditRecord: Hashable, Sendable {
    public var sequence: Int64
    public var entry: AuditEntry
    public var previousHash: String
    public var hash: String

    public init(sequence: Int64, entry: AuditEntry, previousHash: String, hash: String) {
        self.sequence = sequence
        self.entry = entry
        self.previousHash = previousHash
        self.hash = hash
    }
}

/// The hash chain that makes the audit log tamper-evident.
///
/// Each record's hash is SHA-256 over the previous record's hash and a canonical JSON of the record's fields, so
/// editing any field, deleting or reordering records breaks the chain at the first affected record.
public enum AuditChain {
    /// The "previous hash" of the first record.
    public static let genesis = String(repeating: "0", count: 64)

    /// The canonical bytes hashed for a record (fixed member order, compact JSON).
    public static func canonicalText(sequence: Int64, entry: AuditEntry) -> String {
        let object: JSONValue = [
            "seq": .number(JSONNumber(sequence)),
            "time": .number(JSONNumber(entry.time.microseconds)),
            "actor": .string(entry.actor),
            "action": .string(entry.action),
            "from": .string(entry.from),
            "to": .string(entry.to),
            "reason": .string(entry.reason),
            "result": .string(entry.result.rawValue),
            "version": entry.version.map { .number(JSONNumber($0)) } ?? .null,
            "detail": .string(entry.detail),
        ]
        return object.compactText
    }

    public static func hash(sequence: Int64, entry: AuditEntry, previousHash: String) -> String {
        SHA256.hex(Array((previousHash + "\n" + canonicalText(sequence: sequence, entry: entry)).utf8))
    }

    /// Chains `entry` after `previous` (nil for the first record).
    public static func record(_ entry: AuditEntry, after previous: AuditRecord?) -> AuditRecord {
        let sequence = (previous?.sequence ?? 0) + 1
        let prev = previous?.hash ?? genesis
        return AuditRecord(sequence: sequence, entry: entry, previousHash: prev, hash: hash(sequence: sequence, entry: entry, previousHash: prev))
    }

    /// Where a chain breaks.
    public struct Break: Error, Hashable, Sendable, CustomStringConvertible {
        public var sequence: Int64
        public var problem: String
        public init(sequence: Int64, problem: String) {
            self.sequence = sequence
            self.problem = problem
        }
        public var description: String { "audit record \(sequence): \(problem)" }
    }

    /// Checks records given oldest first; returns the first break, or nil when the chain is intact.
    public static func verify<S: Sequence>(_ records: S) -> Break? where S.Element == AuditRecord {
        var expectedSequence: Int64 = 1
        var previousHash = genesis
        for r in records {
            if r.sequence != expectedSequence {
                return Break(
                    sequence: expectedSequence,
                    problem: r.sequence > expectedSequence
                        ? "missing (deleted?): the next record present is \(r.sequence)" : "out of order (found \(r.sequence))")
            }
            if r.previousHash != previousHash {
                return Break(sequence: r.sequence, problem: "does not follow record \(r.sequence - 1) (its predecessor was edited or removed)")
            }
            if hash(sequence: r.sequence, entry: r.entry, previousHash: r.previousHash) != r.hash {
                return Break(sequence: r.sequence, problem: "content does not match its hash (edited)")
            }
            previousHash = r.hash
            expectedSequence += 1
        }
        return nil
    }
}
