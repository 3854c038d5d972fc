// What a store's integrity check found, for every backend's `verifyIntegrity` (SQLite, PostgreSQL, Firebase).

/// What `verifyIntegrity` checked, when everything holds.
public struct ConfigIntegrityReport: Sendable, Equatable {
    public var auditRecords: Int
    public var versions: Int
    public var headSequence: Int64
    public var headHash: String

    public init(auditRecords: Int, versions: Int, headSequence: Int64, headHash: String) {
        self.auditRecords = auditRecords
        self.versions = versions
        self.headSequence = headSequence
        self.headHash = headHash
    }
}

/// The first thing found wrong in a store, naming the record or version.
public struct ConfigIntegrityProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// `audit record 17`, `version 12`, `database`, `chain head`.
    public var subject: String
    public var problem: String
    /// The audit record where the chain breaks, when the problem is one record's (or a version's pinned record):
    /// structured, so that readers (the console's audit view) need not take it from the subject's text.
    public var sequence: Int64?
    public var description: String { "\(subject): \(problem)" }

    public init(_ subject: String, _ problem: String, sequence: Int64? = nil) {
        self.subject = subject
        self.problem = problem
        self.sequence = sequence
    }

    /// A problem of audit record `sequence`: the subject `audit record N`, and the sequence as a field.
    public init(auditRecord sequence: Int64, _ problem: String) {
        self.init("audit record \(sequence)", problem, sequence: sequence)
    }
}
