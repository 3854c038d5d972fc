import CommandLineKit
import Rollout

extension ExitCode {
    /// The documented exit code of a write the write path did not publish (README's table): a conflict or lost race
    /// is 3, every refusal (read-only, guardrail, step-up, another policy) is 4, a percentage outside 0–100 is a
    /// usage error (2), anything else the rollout or the store would not do is 1, and nothing to change is 0.
    public init(_ refusal: WriteRefusal) {
        switch refusal {
        case .nothingToChange: self = .ok
        case .conflict, .unexpectedCurrent: self = .conflict
        case .readOnly, .guardrail, .stepUpNeeded, .stepUpFailed, .stepUpBlocked, .policy: self = .refused
        case .invalidPercentage: self = .usage
        case .plan, .invalid: self = .failure
        }
    }
}

extension WriteRefusal {
    /// The CLI's one line: the refusal in words, and for a step-up code the flag that gives one.
    public var commandLineText: String {
        asksForStepUpCode ? description + " (add --code CODE from your authenticator app)" : description
    }
}
