import Timekeeping

/// An enrolment that has shown its secret but not yet seen a valid code from the new authenticator.
///
/// Step-up counts only confirmed operators. A pending enrolment lives for `Enrolment.lifetime`, allows
/// `Enrolment.attempts` wrong confirmation codes, and is replaced when the same operator starts over.
public struct PendingEnrolment: Sendable, Equatable {
    public var id: OperatorID
    public var secret: TOTPSecret
    public var createdAt: Instant
    /// The enrolled operator whose code allowed this enrolment; nil for the first operator of a store.
    public var approvedBy: OperatorID?
    public var failedAttempts: Int

    public init(
        id: OperatorID, secret: TOTPSecret, createdAt: Instant, approvedBy: OperatorID?, failedAttempts: Int = 0
    ) {
        self.id = id
        self.secret = secret
        self.createdAt = createdAt
        self.approvedBy = approvedBy
        self.failedAttempts = failedAttempts
    }

    /// The URI the authenticator scans, with `issuer` as the account's heading (`rollout`).
    public func uri(issuer: String = Enrolment.issuer) -> OTPAuthURI {
        OTPAuthURI(secret: secret, issuer: issuer, account: id.rawValue)
    }
}

/// Enrolment of an operator: a new secret, shown once, confirmed by one valid code.
public enum Enrolment {
    /// The issuer written into the `otpauth://` URI: the heading the authenticator shows.
    public static let issuer = "rollout"
    /// How long a pending enrolment waits for its confirming code.
    public static let lifetime: Instant.Duration = .hours(1)
    /// Wrong confirmation codes after which the pending enrolment is discarded (its secret may have leaked to
    /// someone guessing); the operator starts over with a new secret.
    public static let attempts = 3

    /// A new pending enrolment with a fresh secret.
    public static func start(_ id: OperatorID, approvedBy: OperatorID?, at now: Instant) -> PendingEnrolment {
        PendingEnrolment(id: id, secret: .generate(), createdAt: now, approvedBy: approvedBy)
    }

    /// What confirming a pending enrolment came to.
    public enum Confirmation: Sendable, Equatable {
        /// The code matched: store `record` as the operator's enrolment and drop the pending one.
        case enrolled(OperatorRecord)
        /// The code did not match; store the pending enrolment with its new count and ask again.
        case retry(PendingEnrolment, outcome: CodeOutcome)
        /// Too many wrong codes or too late: drop the pending enrolment; the operator starts over. `outcome` is
        /// the last code's, nil when it came too late to be looked at.
        case discarded(Discard, outcome: CodeOutcome?)
    }

    /// Why a pending enrolment was dropped.
    public enum Discard: String, Sendable, Equatable {
        case tooManyWrongCodes = "too many wrong codes"
        case tooLate = "not confirmed within an hour"
    }

    /// Checks the first code of a new authenticator (±1 step, as for every code).
    ///
    /// The accepted step becomes the operator's last accepted step, so the confirming code cannot be replayed
    /// for a protected change.
    public static func confirm(_ pending: PendingEnrolment, code: String?, at now: Instant, totp: TOTP = .standard)
        -> Confirmation
    {
        if now - pending.createdAt > lifetime { return .discarded(.tooLate, outcome: nil) }
        let record = OperatorRecord(id: pending.id, secret: pending.secret, enrolledAt: now)
        let verifier = CodeVerifier(totp: totp, lockoutAttempts: attempts, lockoutDuration: lifetime)
        let (outcome, checked) = verifier.verify(code, record: record, at: now)
        switch outcome {
        case .accepted:
            return .enrolled(checked)
        case .wrong, .expired:
            var p = pending
            p.failedAttempts += 1
            return p.failedAttempts >= attempts
                ? .discarded(.tooManyWrongCodes, outcome: outcome) : .retry(p, outcome: outcome)
        default:
            return .retry(pending, outcome: outcome)
        }
    }
}
