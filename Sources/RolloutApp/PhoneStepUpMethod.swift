import FoundationEssentials
import PhoneVerification
import Platform
import Rollout
import StepUp
import Timekeeping

/// Step-up by a code sent to the operator's phone (SMS, then a voice call), through Vonage Verify v2.
///
/// The credentials come from the file named by `$ROLLOUT_VONAGE_CREDENTIALS` (mode 0600, `VonageCredentials`);
/// `$ROLLOUT_VONAGE_URL` points the client at another base URL (a test's fake). The code goes from `readCode` to
/// the provider's check and nowhere else: the write path receives only the provider's outcome, records it against
/// the operator's phone lockout and audits it.
extension StepUpMethods {
    /// The Verify client of this invocation's environment; refuses missing or loosely protected credentials.
    public static func phoneClient(environment: [String: String] = ProcessInfo.processInfo.environment) throws
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
        return VonageVerifyClient(credentials: credentials, base: base)
    }

    /// Publishes `request` through `path`, approved by a code sent to the actor's phone when step-up asks for one
    /// (otherwise as it is). The verification is started once (SMS, then voice); each code typed is checked by
    /// the provider and the outcome goes through the write path (audited, counted towards the phone method's
    /// lockout); a wrong code asks again while the provider allows and the method is not locked. A provider
    /// that refuses (409, 422, 429, ...) or an empty code refuses the change, audited; nothing is published on
    /// any failure.
    public static func publishWithPhone(
        _ request: WritePath.Request, on path: WritePath, client: VonageVerifyClient, readCode: () -> String?,
        notice: (String) -> Void
    ) throws -> WritePath.Outcome {
        guard let policy = path.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first else {
            return try path.execute(request)
        }
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
        func submit(_ verification: String, _ outcome: PhoneApproval.Outcome) throws -> WritePath.Outcome {
            approved.phoneApproval = PhoneApproval(verification: verification, outcome: outcome)
            return try path.execute(approved)
        }
        // A method the policy does not accept for this change, or a locked one, is refused (and audited) by the
        // write path before anything is sent.
        if try !policy.accepts(.phone, for: preview.proposal) || enrolment.isLockedOut(at: path.clock.now()) {
            return try submit("-", .unavailable("not started"))
        }
        let verification: String
        do {
            verification = try client.start(number: PhoneNumber.digits(enrolment.number))
        } catch {
            notice("provider: \(error.description)")
            return try submit("-", .unavailable(error.description))
        }
        notice(
            "provider: verification \(verification) started: a code by SMS to \(enrolment.masked), then a voice call "
                + "if it is not entered within 60 s (type 'call' to be called now)")
        while true {
            guard let code = readCode(), !code.isEmpty else {
                try? client.cancel(verification)
                notice("provider: verification \(verification) cancelled")
                return try submit(verification, .unavailable("no code was entered; the verification was cancelled"))
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
            let outcome: PhoneApproval.Outcome
            do {
                switch try client.check(verification, code: code) {
                case .verified:
                    outcome = .verified
                    notice("provider: code accepted (verification \(verification) completed)")
                case .wrong:
                    outcome = .wrong
                    notice("provider: wrong code (400)")
                case .tooManyAttempts:
                    outcome = .tooManyAttempts
                    notice("provider: too many wrong codes (410): verification \(verification) ended")
                }
            } catch {
                notice("provider: \(error.description)")
                outcome = .unavailable(error.description)
            }
            do {
                return try submit(verification, outcome)
            } catch let failure as WritePath.Failure {
                guard outcome == .wrong, case .refused = failure,
                    try policy.phoneEnrolment(of: request.actor)?.isLockedOut(at: path.clock.now()) == false
                else {
                    // Ended here: the verification is cancelled unless the provider already ended it.
                    if outcome != .tooManyAttempts, outcome != .verified { try? client.cancel(verification) }
                    throw failure
                }
                notice("\(failure); enter the code again (empty cancels)")
            }
        }
    }
}
