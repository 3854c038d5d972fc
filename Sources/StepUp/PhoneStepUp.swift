import Rollout
import Timekeeping

/// An operator's phone for step-up by a code sent by SMS or a voice call: the number (E.164, stored sealed like a
/// TOTP secret) and the method's own lockout. Wrong phone codes lock the phone method only: the operator's
/// one-time codes and security key are not affected, and the other way round.
public struct PhoneEnrolment: Sendable, Equatable {
    public var operatorID: OperatorID
    /// `+` and 7 to 15 digits, the first not 0.
    public var number: String
    public var enrolledAt: Instant
    /// Consecutive wrong phone codes since the last accepted one.
    public var failedAttempts: Int
    public var lockedUntil: Instant?

    public init(operatorID: OperatorID, number: String, enrolledAt: Instant, failedAttempts: Int = 0, lockedUntil: Instant? = nil) {
        self.operatorID = operatorID
        self.number = number
        self.enrolledAt = enrolledAt
        self.failedAttempts = failedAttempts
        self.lockedUntil = lockedUntil
    }

    public func isLockedOut(at now: Instant) -> Bool { lockedUntil.map { now < $0 } ?? false }

    /// The number as shown on screen and in the audit log: `+44•••••0123` (the country's first digits and the
    /// last four).
    public var masked: String { PhoneNumber.masked(number) }

    /// The enrolment after an attempt: an accepted code clears the count, a wrong one counts and locks the
    /// method for `policy.lockoutDuration` at `policy.lockoutAttempts` consecutive failures.
    public func after(accepted: Bool, policy: StepUpPolicy, at now: Instant) -> PhoneEnrolment {
        var next = self
        if accepted {
            next.failedAttempts = 0
            next.lockedUntil = nil
        } else {
            next.failedAttempts += 1
            if next.failedAttempts >= policy.lockoutAttempts {
                next.lockedUntil = now + policy.lockoutDuration
                next.failedAttempts = 0
            }
        }
        return next
    }
}

/// E.164 numbers as `operator enroll --method phone --phone` takes them.
public enum PhoneNumber {
    /// `+` followed by 7 to 15 digits, the first not 0 (spaces and dashes between digits are dropped); nil
    /// otherwise.
    public static func normalized(_ text: String) -> String? {
        let kept = text.filter { $0 != " " && $0 != "-" }
        guard kept.hasPrefix("+") else { return nil }
        let digits = kept.dropFirst()
        guard (7...15).contains(digits.count), digits.allSatisfy({ $0.isASCII && $0.isNumber }), digits.first != "0"
        else { return nil }
        return "+" + digits
    }

    /// The digits a provider takes (E.164 without `+`).
    public static func digits(_ number: String) -> String { String(number.drop { $0 == "+" }) }

    public static func masked(_ number: String) -> String {
        let digits = Array(self.digits(number))
        guard digits.count > 6 else { return "+" + String(repeating: "•", count: digits.count) }
        return "+" + String(digits.prefix(2)) + String(repeating: "•", count: digits.count - 6) + String(digits.suffix(4))
    }
}

/// Port: where a store keeps its operators' phones (`PhoneEnrolment`, the number sealed).
///
/// Rules: `recordPhoneAttempt` reads the enrolment, stores it as `PhoneEnrolment.after` makes it and hands the
/// stored state to `audit`, in one transaction (inside the write path's); nil when `id` has no phone.
public protocol PhoneStepUpStore: AnyObject, Sendable {
    func phoneEnrolment(_ id: OperatorID) throws -> PhoneEnrolment?
    func recordPhoneAttempt(
        _ id: OperatorID, accepted: Bool, policy: StepUpPolicy, at now: Instant, audit: (PhoneEnrolment) throws -> Void
    ) throws -> PhoneEnrolment?
}

/// What the provider answered when the step-up policy checked a code (`PhoneCodeChecker.check`).
public enum PhoneCheckOutcome: Sendable, Equatable {
    /// The provider accepted the code.
    case verified
    /// The provider refused the code (400); another may be tried.
    case wrong
    /// The provider ended the verification after too many wrong codes (410).
    case tooManyAttempts
    /// The provider no longer knows the verification (404): its time ran out (each channel's `channel_timeout`,
    /// then the request ends), or it was cancelled or already used. Its words.
    case expired(String)
    /// The verification id is not one this checker started for this phone and this change: refused unasked.
    case notStartedHere
    /// The provider could not check the code (409, 422, 429, no answer, ...): its words, never a code.
    case unavailable(String)

    /// The audit log's word for it.
    public var result: String {
        switch self {
        case .verified: "accepted"
        case .wrong: "wrong-code"
        case .tooManyAttempts: "too-many-attempts"
        case .expired: "expired"
        case .notStartedHere: "not-started-here"
        case .unavailable: "provider-refused"
        }
    }
}

/// Port: the phone provider as the step-up policy asks it. The policy checks a code itself, through this port,
/// for a verification the port started: a request to the write path carries only a verification id and a code,
/// never an outcome.
///
/// Rules: `start` sends a code to `number` for the change whose binding is `binding` (`StepUpWritePolicy
/// .phoneBinding`) and remembers the verification; `check` answers `.notStartedHere` without asking the provider
/// unless `verification` was started by this checker for the same number and binding; otherwise it asks the
/// provider and returns its answer. Neither logs nor returns the code.
public protocol PhoneCodeChecker: AnyObject, Sendable {
    func start(number: String, binding: [UInt8]) throws -> String
    func check(verification: String, code: String, number: String, binding: [UInt8]) -> PhoneCheckOutcome
}
