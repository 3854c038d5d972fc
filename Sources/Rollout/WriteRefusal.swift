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
    /// The session is read-only (`--read-only`, or a reader's store).
    case readOnly
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
        case .readOnly: self = .readOnly
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
        case .readOnly: "refused: " + Self.readOnlyDetail
        case .conflict(let c): c.description
        case .unexpectedCurrent(let m), .invalidPercentage(let m), .invalid(let m): m
        case .plan(let e): e.description
        }
    }

    /// The read-only refusal without its verdict word (the console's headline says `Refused`).
    public static let readOnlyDetail = "this session is read-only (--read-only)"
}
