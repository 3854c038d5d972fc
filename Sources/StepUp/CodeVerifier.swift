import Crypto
import Timekeeping

/// An enrolled operator as the store keeps it: the secret plus the state that replay protection and lockout
/// need.
///
/// Printing a record never prints the secret (`TOTPSecret` is redacted).
public struct OperatorRecord: Sendable, Equatable {
    public var id: OperatorID
    public var secret: TOTPSecret
    public var enrolledAt: Instant
    /// The time step of the last accepted code; a code of this step or an earlier one is a replay.
    public var lastAcceptedStep: Int64?
    /// Consecutive wrong codes since the last accepted one (or since the last lockout ended).
    public var failedAttempts: Int
    /// While in the future, every code is refused without being looked at.
    public var lockedUntil: Instant?

    public init(
        id: OperatorID, secret: TOTPSecret, enrolledAt: Instant, lastAcceptedStep: Int64? = nil,
        failedAttempts: Int = 0, lockedUntil: Instant? = nil
    ) {
        self.id = id
        self.secret = secret
        self.enrolledAt = enrolledAt
        self.lastAcceptedStep = lastAcceptedStep
        self.failedAttempts = failedAttempts
        self.lockedUntil = lockedUntil
    }

    /// Whether a lockout is in force at `now`.
    public func isLockedOut(at now: Instant) -> Bool { lockedUntil.map { now < $0 } ?? false }

    /// The end of the lockout as a clock reading `now` believes it (nil: not locked out): at most `longest` from
    /// now, since a later end was written by a clock ahead of this one (`CodeVerifier.verify` stores it so).
    public func lockedUntil(at now: Instant, longest: Instant.Duration) -> Instant? {
        guard let lockedUntil, now < lockedUntil else { return nil }
        return min(lockedUntil, now + longest)
    }
}

/// What became of one code.
public enum CodeOutcome: Sendable, Equatable {
    /// The code matched time step `step`, newer than any accepted before.
    case accepted(step: Int64)
    /// No code was given.
    case missing
    /// Not a code at all (wrong length or not digits); not counted as a guess.
    case malformed
    /// A code of no step near now; counted towards the lockout.
    case wrong
    /// The code of a step outside the accepted window (`stepOffset` steps from now, negative for the past):
    /// typically a code read too late or a device clock that is off. Counted towards the lockout.
    case expired(stepOffset: Int64)
    /// The code of a step already used; a fresh code appears at `nextCodeAt`. Not counted.
    case replayed(nextCodeAt: Instant)
    /// The operator is locked out until `until`; the code was not looked at.
    case lockedOut(until: Instant)
    /// The acting operator has no enrolment.
    case notEnrolled

    /// The stable spelling in the audit log: accepted, missing, malformed, wrong, expired, replayed,
    /// locked-out, not-enrolled.
    public var result: String {
        switch self {
        case .accepted: "accepted"
        case .missing: "missing"
        case .malformed: "malformed"
        case .wrong: "wrong"
        case .expired: "expired"
        case .replayed: "replayed"
        case .lockedOut: "locked-out"
        case .notEnrolled: "not-enrolled"
        }
    }

    public var isAccepted: Bool { if case .accepted = self { true } else { false } }
}

/// Checks one-time codes against an operator's record: ±`window` time steps, each step at most once, and a
/// lockout after `lockoutAttempts` consecutive wrong codes.
///
/// Pure: the record comes in, the outcome and the record to store come out, and time is a parameter. The
/// caller must store the returned record atomically with reading it (the store does this in one immediate
/// transaction), or two processes could both accept the same code.
public struct CodeVerifier: Sendable {
    public var totp: TOTP
    /// Steps accepted on either side of the current one (RFC 6238 §5.2 recommends at most one).
    public var window: Int64
    public var lockoutAttempts: Int
    public var lockoutDuration: Instant.Duration
    /// How far behind the window a match is still reported as `expired` rather than `wrong`, so that a person
    /// whose phone clock runs late learns why their codes fail. Only behind: a match ahead of the window is a code
    /// that becomes valid later, and saying so (or when) would tell a guesser which of its guesses to keep for
    /// then, some ten times the odds of the window alone; such a code is `wrong`, as any other.
    public static let diagnosticSteps: Int64 = 10

    public init(
        totp: TOTP = .standard, window: Int64 = 1, lockoutAttempts: Int = 3,
        lockoutDuration: Instant.Duration = .minutes(15)
    ) {
        self.totp = totp
        self.window = window
        self.lockoutAttempts = lockoutAttempts
        self.lockoutDuration = lockoutDuration
    }

    /// A verifier with the lockout rules of `policy`.
    public init(policy: StepUpPolicy, totp: TOTP = .standard) {
        self.init(totp: totp, lockoutAttempts: policy.lockoutAttempts, lockoutDuration: policy.lockoutDuration)
    }

    /// Checks `code` for `record` at `now`.
    ///
    /// Spaces inside the code are ignored (`123 456` as apps display it). Only `wrong` and `expired` count as
    /// guesses; the guess that reaches the limit locks the operator out for `lockoutDuration`. A lockout that
    /// has run out is cleared first, with a fresh allowance of attempts.
    public func verify(_ code: String?, record: OperatorRecord, at now: Instant) -> (
        outcome: CodeOutcome, record: OperatorRecord
    ) {
        var r = record
        let current = totp.step(at: now)
        // What a clock ahead of this one wrote (a machine whose clock ran or was set ahead) is believed only as far
        // as this clock could have written it: a lockout ends at most `lockoutDuration` from now (a lockout until
        // 2036 from a clock ten years ahead locked its operator out for ten years, with nobody able to lift it), and
        // an accepted step beyond the window counts as the window's last (so no code of the window is accepted
        // twice, and the operator's next code is accepted within a step or two, not in years). Both are stored so.
        if let until = r.lockedUntil(at: now, longest: lockoutDuration), until != r.lockedUntil { r.lockedUntil = until }
        if let last = r.lastAcceptedStep, last > current + window { r.lastAcceptedStep = current + window }
        if let until = r.lockedUntil {
            if now < until { return (.lockedOut(until: until), r) }
            r.lockedUntil = nil
            r.failedAttempts = 0
        }
        guard let code, !code.isEmpty else { return (.missing, r) }
        let digits = Array(code.utf8.filter { $0 != 32 })
        guard digits.count == totp.digits, digits.allSatisfy({ (48...57).contains($0) }) else { return (.malformed, r) }

        var matches: [Int64] = []
        // Every step in reach is computed and compared in constant time, whatever matches early.
        for step in (current - window - Self.diagnosticSteps)...(current + window) {
            if constantTimeEquals(Array(totp.code(secret: r.secret, step: step).utf8), digits) { matches.append(step) }
        }
        let inWindow = matches.filter { abs($0 - current) <= window }
        if let step = inWindow.first(where: { r.lastAcceptedStep == nil || $0 > r.lastAcceptedStep! }) {
            r.lastAcceptedStep = step
            r.failedAttempts = 0
            return (.accepted(step: step), r)
        }
        if !inWindow.isEmpty, let last = r.lastAcceptedStep {
            return (.replayed(nextCodeAt: max(now, totp.start(ofStep: last + 1))), r)
        }
        let outcome: CodeOutcome = matches.first.map { .expired(stepOffset: $0 - current) } ?? .wrong
        r.failedAttempts += 1
        if r.failedAttempts >= lockoutAttempts { r.lockedUntil = now + lockoutDuration }
        return (outcome, r)
    }
}
