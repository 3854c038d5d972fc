/// One check of a verification and how it went, for people (the CLI lists every one) and for JSON.
public struct CheckRecord: Hashable, Sendable {
    public enum Outcome: String, Hashable, Sendable {
        case passed
        case failed
        /// Not run because an earlier check it depends on failed.
        case skipped
    }

    /// A stable identifier, e.g. `certificateChain`.
    public var name: String
    /// A short human title, e.g. `certificate chain`.
    public var title: String
    public var outcome: Outcome
    /// What was found (on success) or why it failed.
    public var detail: String
    /// The failure's error code, e.g. `nonceMismatch`.
    public var errorCode: String?

    public init(name: String, title: String, outcome: Outcome, detail: String, errorCode: String? = nil) {
        self.name = name
        self.title = title
        self.outcome = outcome
        self.detail = detail
        self.errorCode = errorCode
    }
}

/// The record of a verification: every check in order and the result.
public struct VerificationReport<Value: Sendable, Failure: Error & Sendable>: Sendable {
    public var checks: [CheckRecord]
    public var result: Result<Value, Failure>

    public var passed: Bool { if case .success = result { true } else { false } }
    public var value: Value? { try? result.get() }
    public var failure: Failure? { if case .failure(let e) = result { e } else { nil } }
}

/// Collects check records while a verification runs; the first failure decides the result.
///
/// Without `detailed`, passed checks carry no detail text: `verify` calls on hot paths skip building strings
/// that only `evaluate` (the CLI) shows.
struct CheckLog<Failure: Error & CodedError> {
    let detailed: Bool
    var checks: [CheckRecord] = []
    var firstFailure: Failure?

    init(detailed: Bool) { self.detailed = detailed }

    mutating func pass(_ name: String, _ title: String, _ detail: @autoclosure () -> String) {
        checks.append(CheckRecord(name: name, title: title, outcome: .passed, detail: detailed ? detail() : ""))
    }

    mutating func fail(_ name: String, _ title: String, _ error: Failure) {
        checks.append(
            CheckRecord(name: name, title: title, outcome: .failed, detail: error.description, errorCode: error.code))
        if firstFailure == nil { firstFailure = error }
    }

    mutating func skip(_ name: String, _ title: String, _ why: String) {
        checks.append(CheckRecord(name: name, title: title, outcome: .skipped, detail: why))
    }

    /// Records `error` as a failure of this check, or a pass with `detail` when nil.
    mutating func check(_ name: String, _ title: String, _ error: Failure?, passed detail: @autoclosure () -> String) {
        if let error { fail(name, title, error) } else { pass(name, title, detail()) }
    }
}

/// An error with a stable, machine-readable code (its case name), used in reports, JSON and telemetry.
public protocol CodedError: Error, CustomStringConvertible {
    var code: String { get }
}
