import Crypto
import PhoneVerification
import Platform
import Rollout
import StepUp
import Timekeeping
import WebClient

/// Step-up by a code sent to the operator's phone (SMS, then a voice call), through Vonage Verify v2.
///
/// The credentials come from the file named by `$ROLLOUT_VONAGE_CREDENTIALS` (mode 0600, `VonageCredentials`);
/// `$ROLLOUT_VONAGE_URL` points the client at another base URL (a test's fake). The code goes from `readCode` to
/// the provider's check and nowhere else: the write path receives only the provider's outcome, records it against
/// the operator's phone lockout and audits it.
extension StepUpMethods {
    /// The Verify client of this invocation's environment; refuses missing or loosely protected credentials.
    public static func phoneClient(environment: [String: String] = Environment.current) throws
        -> VonageVerifyClient
    {
        guard let path = environment["ROLLOUT_VONAGE_CREDENTIALS"], !path.isEmpty else {
            throw SessionRefusal(
                .unsupported,
                "phone verification needs $ROLLOUT_VONAGE_CREDENTIALS: a file (mode 0600) holding "
                    + "{\"api_key\": ..., \"api_secret\": ...} of the Vonage account")
        }
        let credentials: VonageCredentials
        do {
            credentials = try VonageCredentials.load(path)
        } catch {
            throw SessionRefusal(.unsupported, error.description)
        }
        let base = environment["ROLLOUT_VONAGE_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? VonageVerifyClient.productionBase
        // The rule of every endpoint a web client calls: codes and the account's secret never cross a network in
        // clear text (plain http only to a loopback host, where the tests' provider listens).
        do { try WebURL.checkScheme(base, what: "ROLLOUT_VONAGE_URL") } catch { throw SessionRefusal(.unsupported, error.description) }
        return VonageVerifyClient(credentials: credentials, base: base)
    }

    /// Publishes `request` through `path`, approved by a code sent to the actor's phone when step-up asks for one
    /// (otherwise as it is). The verification is started once (SMS, then voice) through the provider port the
    /// write path's step-up policy checks codes with (`VonagePhoneCodes`, bound to this change); each code typed
    /// goes to the write path, whose policy asks the provider itself and records the answer (audited, counted
    /// towards the phone method's lockout); a wrong code asks again while the provider allows and the method is
    /// not locked. A provider that refuses (409, 422, 429, ...), an expired verification or an empty code refuses
    /// the change, audited; nothing is published on any failure.
    public static func publishWithPhone(
        _ request: WritePath.Request, on original: WritePath, client: VonageVerifyClient, readCode: () -> String?,
        notice: (String) -> Void
    ) throws -> WritePath.Outcome {
        guard let unwired = original.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first else {
            return try original.execute(request)
        }
        let codes = VonagePhoneCodes(client: client)
        let policy = unwired.checkingPhoneCodes(with: codes)
        let path = original.replacingStepUp(with: policy)
        let preview = try path.preview(request)
        // Asked of the policy, not read from the preview: a locked one-time code does not lock this method.
        let needed = try !policy.stepUpReasons(for: preview.proposal).isEmpty
        guard needed else { return try path.execute(request) }
        guard let enrolment = try policy.phoneEnrolment(of: request.actor) else {
            throw SessionRefusal(
                .unsupported,
                "\(request.actor) has no phone in this store: enrol one with 'rollout operator enroll --method phone --phone +NUMBER'")
        }
        var approved = request
        func submit(_ verification: String, _ submission: PhoneApproval.Submission) throws -> WritePath.Outcome {
            approved.phoneApproval = PhoneApproval(verification: verification, submission: submission)
            return try path.execute(approved)
        }
        // A method the policy does not accept for this change, or a locked one, is refused (and audited) by the
        // write path before anything is sent.
        if try !policy.accepts(.phone, for: preview.proposal) || enrolment.isLockedOut(at: path.clock.now()) {
            return try submit("-", .notChecked("not started"))
        }
        let verification: String
        do {
            verification = try codes.start(number: enrolment.number, binding: policy.phoneBinding(for: preview.proposal))
        } catch let error as PhoneVerificationError {
            notice("provider: \(error.description)")
            return try submit("-", .notChecked(error.description))
        }
        notice(
            "provider: verification \(verification) started: a code by SMS to \(enrolment.masked), then a voice call "
                + "if it is not entered within 60 s (type 'call' to be called now)")
        while true {
            guard let code = readCode(), !code.isEmpty else {
                try? client.cancel(verification)
                notice("provider: verification \(verification) cancelled")
                return try submit(verification, .cancelled)
            }
            if code.lowercased() == "call" {
                do {
                    try client.nextChannel(verification)
                    notice("provider: calling \(enrolment.masked) now to read the same code (voice)")
                } catch {
                    notice("provider: \(error.description)")
                }
                continue
            }
            do {
                // The provider is asked here, outside the write path's transaction; the policy takes this answer.
                codes.checkAhead(
                    verification: verification, code: code, number: enrolment.number,
                    binding: policy.phoneBinding(for: preview.proposal))
                let outcome = try submit(verification, .code(code))
                if codes.lastOutcome(verification) == .verified {
                    notice("provider: code accepted (verification \(verification) completed)")
                }
                return outcome
            } catch let failure as WritePath.Failure {
                let outcome = codes.lastOutcome(verification)
                switch outcome {
                case .wrong: notice("provider: wrong code (400)")
                case .tooManyAttempts: notice("provider: too many wrong codes (410): verification \(verification) ended")
                case .expired(let words): notice("provider: verification \(verification) expired or ended (404: \(words))")
                case .unavailable(let words): notice("provider: \(words)")
                case .verified, .notStartedHere, nil: break
                }
                guard outcome == .wrong, case .refused = failure,
                    try policy.phoneEnrolment(of: request.actor)?.isLockedOut(at: path.clock.now()) == false
                else {
                    // Ended here: the verification is cancelled unless the provider already ended it.
                    switch outcome {
                    case .tooManyAttempts?, .verified?, .expired?: break
                    default: try? client.cancel(verification)
                    }
                    throw failure
                }
                notice("\(failure); enter the code again (empty cancels)")
            }
        }
    }
}

/// The phone port of the step-up policy on Vonage Verify v2: starts a verification for a change and checks a code
/// only for a verification it started itself, for the same number and change (`PhoneCodeChecker`). Remembers the
/// provider's last answer per verification, so the method can say what the provider said; never the code.
public final class VonagePhoneCodes: PhoneCodeChecker, @unchecked Sendable {
    private let client: VonageVerifyClient
    private let lock = Lock()
    private var started: [String: (number: String, binding: [UInt8])] = [:]
    private var outcomes: [String: PhoneCheckOutcome] = [:]
    /// Answers asked ahead (`checkAhead`), by verification: for the SHA-256 of the code, taken once by `check`.
    private var ahead: [String: (code: [UInt8], outcome: PhoneCheckOutcome)] = [:]

    public init(client: VonageVerifyClient) { self.client = client }

    public func start(number: String, binding: [UInt8]) throws -> String {
        let id = try client.start(number: PhoneNumber.digits(number))
        lock.withLock { started[id] = (number, binding) }
        return id
    }

    /// Asks the provider about `code` before the write path's transaction, so that the transaction (the SQLite
    /// write lock, the PostgreSQL head lock) never waits on the provider: the answer is kept for the next `check` of
    /// this verification with the same code, number and binding, which takes it once. A change whose base moved
    /// meanwhile has another binding: its `check` answers `.notStartedHere`, refused unasked.
    public func checkAhead(verification: String, code: String, number: String, binding: [UInt8]) {
        let outcome = ask(verification: verification, code: code, number: number, binding: binding)
        lock.withLock { ahead[verification] = (SHA256.hash(Array(code.utf8)), outcome) }
    }

    public func check(verification: String, code: String, number: String, binding: [UInt8]) -> PhoneCheckOutcome {
        let known = lock.withLock { started[verification] }
        if let known, known.number == number, known.binding == binding,
            let kept = lock.withLock({ ahead.removeValue(forKey: verification) })
        {
            if kept.code == SHA256.hash(Array(code.utf8)) { return kept.outcome }
        }
        return ask(verification: verification, code: code, number: number, binding: binding)
    }

    private func ask(verification: String, code: String, number: String, binding: [UInt8]) -> PhoneCheckOutcome {
        let known = lock.withLock { started[verification] }
        let outcome: PhoneCheckOutcome
        if let known, known.number == number, known.binding == binding {
            do {
                switch try client.check(verification, code: code) {
                case .verified: outcome = .verified
                case .wrong: outcome = .wrong
                case .tooManyAttempts: outcome = .tooManyAttempts
                }
            } catch {
                if case .notFound(let words) = error { outcome = .expired(words) } else { outcome = .unavailable(error.description) }
            }
        } else {
            outcome = .notStartedHere
        }
        lock.withLock { outcomes[verification] = outcome }
        return outcome
    }

    /// The provider's last answer for `verification` (nil before any check).
    public func lastOutcome(_ verification: String) -> PhoneCheckOutcome? { lock.withLock { outcomes[verification] } }
}

extension WritePath {
    /// This write path with its step-up policy replaced by `policy` (the same policy given a phone port).
    public func replacingStepUp(with policy: StepUpWritePolicy) -> WritePath {
        var path = WritePath(
            store: store, clock: clock, policies: policies.map { $0 is StepUpWritePolicy ? policy : $0 }, names: names,
            readOnlyCause: readOnlyCause, requireReasonForIncrease: requireReasonForIncrease, newSeed: newSeed)
        path.retryLimit = retryLimit
        return path
    }
}
