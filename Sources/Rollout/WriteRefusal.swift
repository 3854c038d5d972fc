/// Why the write path published nothing, as every caller decides on it: the console's dialog and message, the
/// CLI's exit code, a ramp plan's wait or pause.
///
/// Built once from the write path's failure (`WriteRefusal(failure)`; `.nothingToChange` from its `.unchanged`
/// outcome); callers switch on the case and never on the words. `description` is the refusal in words (the CLI
/// prints it, the console puts its headline before it, plans quote it).
public enum WriteRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    /// The change would change nothing (`set 25` at 25%); the summary says what was asked.
    case nothingToChange(summary: String)
    /// The telemetry guardrail refuses: its reason and what it would accept instead.
    case guardrail(PolicyRefusal)
    /// A step-up code is needed and none was given.
    case stepUpNeeded(PolicyRefusal)
    /// The step-up code given did not pass; a fresh code may.
    case stepUpFailed(PolicyRefusal)
    /// Step-up cannot pass now (not enrolled, locked out).
    case stepUpBlocked(PolicyRefusal)
    /// Any other policy refuses (a reason for an increase, rollout protection).
    case policy(PolicyRefusal)
    /// The session is read-only: why (`--read-only`, or a store file this user cannot write).
    case readOnly(ReadOnlyCause)
    /// Someone else published first (compare-and-swap); the report names the winner.
    case conflict(WritePath.ConflictReport)
    /// The rollout is not where the operator said it was (`set --expect`): a lost race, like a conflict.
    case unexpectedCurrent(String)
    /// The rollout refuses the operation on the template as it is (e.g. resume when not killed).
    case plan(RolloutError)
    /// The percentage is outside 0–100 (a usage error).
    case invalidPercentage(String)
    /// Anything else the write path could not do (a version that does not exist, an invalid template).
    case invalid(String)

    public init(_ failure: WritePath.Failure) {
        switch failure {
        case .readOnly(let cause): self = .readOnly(cause)
        case .invalid(let m): self = .invalid(m)
        case .invalidPercentage(let m): self = .invalidPercentage(m)
        case .unexpectedCurrent(let m): self = .unexpectedCurrent(m)
        case .plan(let e): self = .plan(e)
        case .conflict(let c): self = .conflict(c)
        case .refused(let r):
            switch r.kind {
            case .guardrail: self = .guardrail(r)
            case .stepUpNeeded: self = .stepUpNeeded(r)
            case .stepUpFailed: self = .stepUpFailed(r)
            case .stepUpBlocked: self = .stepUpBlocked(r)
            case .other: self = .policy(r)
            }
        }
    }

    /// A valid step-up code would lift it (the console asks for one again, the CLI says `--code`).
    public var asksForStepUpCode: Bool {
        switch self {
        case .stepUpNeeded, .stepUpFailed: true
        default: false
        }
    }

    /// The refusal in words: `refused by guardrail: …`, `publish conflict: …`, `nothing to change: …`.
    public var description: String {
        switch self {
        case .nothingToChange(let summary): "nothing to change: \(summary)"
        case .guardrail(let r), .stepUpNeeded(let r), .stepUpFailed(let r), .stepUpBlocked(let r), .policy(let r):
            r.description
        case .readOnly(let cause): "refused: " + cause.description
        case .conflict(let c): c.description
        case .unexpectedCurrent(let m), .invalidPercentage(let m), .invalid(let m): m
        case .plan(let e): e.description
        }
    }
}

/// Why a session refuses every write: the one wording of the CLI's refusal (exit 4), the console's, and the
/// store's own when a write reaches it.
public enum ReadOnlyCause: Sendable, Hashable, CustomStringConvertible {
    /// The operator asked for it (`--read-only`, or a reader's store).
    case requested
    /// The store file at this path opened read-only because this user cannot write it (its mode or owner, a
    /// read-only file system): SQLite would refuse the first write with "attempt to write a readonly database".
    case storeFileNotWritable(String)

    /// The refusal without its verdict word: `this session is read-only (--read-only)`.
    public var description: String {
        switch self {
        case .requested: "this session is read-only (--read-only)"
        case .storeFileNotWritable(let path):
            "this session is read-only: the store file \(path) cannot be written by this user"
        }
    }
}
