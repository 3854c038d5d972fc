import Timekeeping

/// What may be shown of an enrolled operator: everything but the secret (`operator list`, `policy show`), so a
/// connection that may not read secrets (the PostgreSQL viewer role) lists operators too.
public struct OperatorStanding: Sendable, Equatable {
    public var id: OperatorID
    public var enrolledAt: Instant
    /// The time step of the last accepted code.
    public var lastAcceptedStep: Int64?
    /// Consecutive wrong codes since the last accepted one.
    public var failedAttempts: Int
    public var lockedUntil: Instant?

    public init(
        id: OperatorID, enrolledAt: Instant, lastAcceptedStep: Int64?, failedAttempts: Int, lockedUntil: Instant?
    ) {
        self.id = id
        self.enrolledAt = enrolledAt
        self.lastAcceptedStep = lastAcceptedStep
        self.failedAttempts = failedAttempts
        self.lockedUntil = lockedUntil
    }

    public init(_ record: OperatorRecord) {
        self.init(
            id: record.id, enrolledAt: record.enrolledAt, lastAcceptedStep: record.lastAcceptedStep,
            failedAttempts: record.failedAttempts, lockedUntil: record.lockedUntil)
    }

    public func isLockedOut(at now: Instant) -> Bool { lockedUntil.map { now < $0 } ?? false }
}

/// What may be shown of a pending enrolment: everything but the secret.
public struct PendingStanding: Sendable, Equatable {
    public var id: OperatorID
    public var createdAt: Instant
    /// The enrolled operator whose code allowed it; nil for the first operator of a store.
    public var approvedBy: OperatorID?
    public var failedAttempts: Int

    public init(id: OperatorID, createdAt: Instant, approvedBy: OperatorID?, failedAttempts: Int) {
        self.id = id
        self.createdAt = createdAt
        self.approvedBy = approvedBy
        self.failedAttempts = failedAttempts
    }

    public init(_ enrolment: PendingEnrolment) {
        self.init(
            id: enrolment.id, createdAt: enrolment.createdAt, approvedBy: enrolment.approvedBy,
            failedAttempts: enrolment.failedAttempts)
    }
}
