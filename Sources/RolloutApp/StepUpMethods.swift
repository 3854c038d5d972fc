import Platform
import RemoteConfig
import Rollout
import SecurityKey
import StepUp
import Timekeeping

/// The second factors beyond a one-time code, wired to their devices: a security key through libfido2.
///
/// The key is the one named by `$ROLLOUT_SECURITY_KEY` (a device path as `fido2-token -L` lists it), else the
/// first one connected (`unix:PATH` names a key relayed over a Unix socket, `SecurityKeyDevice.socket`); its PIN, when it has one and no built-in verification, comes from
/// `$ROLLOUT_SECURITY_KEY_PIN`. What the key returns is never trusted here: the write path verifies it.
public enum StepUpMethods {
    /// The device of this invocation's environment.
    public static func securityKeyDevice(environment: [String: String] = Environment.current) throws -> SecurityKeyDevice {
        if let path = environment["ROLLOUT_SECURITY_KEY"], !path.isEmpty {
            return path.hasPrefix("unix:") ? .socket(String(path.dropFirst(5))) : .path(path)
        }
        return try SecurityKeyDevice.firstConnected()
    }

    public static func securityKeyPIN(environment: [String: String] = Environment.current) -> String? {
        environment["ROLLOUT_SECURITY_KEY_PIN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// `error` is the key asking for its PIN (none was given, or a wrong one): asking for it may help.
    public static func needsSecurityKeyPIN(_ error: any Error) -> Bool { (error as? SecurityKeyError)?.needsPIN ?? false }

    /// Enrols a security key for `actor` (already enrolled with a code) on `session`'s store: the key makes a
    /// credential (touch and verify), then the settings write path stores it, judged by step-up with `code`.
    public static func enrolSecurityKey(
        session: RolloutSession, device: SecurityKeyDevice, pin: String?, code: String?, notice: (String) -> Void
    ) throws -> SettingsWritePath.Outcome {
        let actor = try OperatorID(session.operatorID)
        let policy = try session.writePath().policies.lazy.compactMap { $0 as? StepUpWritePolicy }.first
        let relyingParty = "rollout:" + (policy.map(\.storeIdentity).flatMap { $0.isEmpty ? nil : $0 } ?? session.label)
        notice("touch your security key to enrol it for \(actor) (relying party \(relyingParty))")
        let credential = try SecurityKeyClient.enrol(
            actor, relyingParty: relyingParty, device: device, pin: pin, at: session.clock.now())
        return try session.settingsWritePath().execute(.enrolSecurityKey(credential), actor: actor.rawValue, code: code)
    }

    /// `request` approved by the acting operator's security key when the write path's step-up asks for a second
    /// factor: the key signs the change document the step-up policy names for this change; unchanged otherwise.
    ///
    /// The base is read now; a version published before the write is then another change, and refused.
    public static func approveWithSecurityKey(
        _ request: WritePath.Request, on path: WritePath, device: SecurityKeyDevice, pin: String?,
        timeoutMilliseconds: Int? = nil, cancellation: SecurityKeyCancellation? = nil, notice: (String) -> Void
    ) throws -> WritePath.Request {
        guard let policy = path.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first else { return request }
        let preview = try path.preview(request)
        // Asked of the policy, not read from the preview: a locked one-time code does not lock this method.
        let needed = try !policy.stepUpReasons(for: preview.proposal).isEmpty
        guard needed else { return request }
        guard let credential = try policy.securityKey(of: request.actor) else {
            throw SessionRefusal(
                .unsupported,
                "\(request.actor) has no security key in this store: enrol one with 'rollout operator enroll --method security-key'")
        }
        let document = policy.changeDocument(
            for: preview.proposal, lifetime: try policy.documentLifetime(for: preview.proposal))
        notice("touch your security key to approve: \(document.summary) (valid until \(document.expiresAt.iso8601))")
        let assertion = try SecurityKeyClient.approve(
            document, with: credential, device: device, pin: pin, timeoutMilliseconds: timeoutMilliseconds,
            cancellation: cancellation)
        var approved = request
        approved.secondFactor = SecondFactorEvidence(document, assertion)
        return approved
    }
}

extension StepUpMethods {
    /// Every security-key approval in `session`'s audit log, verified again from its record alone (`audit verify`
    /// prints them and fails on one that does not verify), oldest first.
    public static func recordedApprovals(_ session: RolloutSession) throws -> [(sequence: Int64, approval: RecordedApproval)] {
        var out: [(Int64, RecordedApproval)] = []
        var before: Int64? = nil
        while true {
            let page = try session.templates.auditRecords(limit: 1000, before: before)
            for record in page where record.entry.result == .stepUpAccepted {
                if let approval = RecordedApproval(actor: record.entry.actor, auditDetail: record.entry.detail) {
                    out.append((record.sequence, approval))
                }
            }
            guard let last = page.last, page.count == 1000 else { break }
            before = last.sequence
        }
        return out.sorted { $0.0 < $1.0 }
    }
}

/// A two-person request that cannot be approved as asked, with what to do.
public struct ApprovalRequestError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

extension StepUpMethods {
    /// The approval that opened two-person request `id` (the newest record of that id), nil when none.
    public static func pendingRequest(_ id: String, in session: RolloutSession) throws -> RecordedApproval? {
        try recordedApprovals(session).last { $0.approval.request == id && !$0.approval.isCoApproval }?.approval
    }

    /// `rollout approve REQUEST`: the acting operator's security key approves the same change document as the
    /// requester's, and the write path publishes the change on the document's base (at most once: a second
    /// approval finds another base and is refused). Refusals (self-approval, expired, another change) come from
    /// the write path, audited.
    public static func approveRequest(
        _ id: String, session: RolloutSession, device: () throws -> SecurityKeyDevice, pin: String?,
        timeoutMilliseconds: Int? = nil, cancellation: SecurityKeyCancellation? = nil, notice: (String) -> Void
    ) throws -> WritePath.Outcome {
        if let cause = session.readOnlyCause { throw WritePath.Failure.readOnly(cause) }
        // An empty write transaction of the settings first, so that a connection that may not write (the
        // PostgreSQL viewer role) is refused (exit 4) before anything is looked up.
        try session.settingsWritePath().backend.transaction { _ in }
        guard let requested = try pendingRequest(id, in: session) else {
            throw ApprovalRequestError(
                description: "no two-person request \(id) in the audit log ('rollout audit show' lists step-up records)")
        }
        let document = requested.document
        let intent: WritePath.Intent
        switch document.kind {
        case .set: intent = .rollout(.set(MicroPercent(document.to)))
        case .nudge: intent = .rollout(.nudge(MicroPercent(document.to - document.from)))
        default:
            throw ApprovalRequestError(description: "request \(id) is a \(document.kind.rawValue); approve covers set and nudge")
        }
        let path = try session.writePath()
        guard let policy = path.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first,
            let credential = try policy.securityKey(of: session.operatorID)
        else {
            throw SessionRefusal(
                .unsupported,
                "\(session.operatorID) has no security key in this store: enrol one with 'rollout operator enroll --method security-key'")
        }
        var request = WritePath.Request(intent: intent, actor: requested.operatorID, reason: document.reason, origin: Wiring.origin)
        request.basedOnETag = document.baseETag
        request.secondFactor = requested.evidence
        notice(
            "touch your security key to approve \(requested.operatorID)'s request \(id): \(document.summary) "
                + "(valid until \(document.expiresAt.iso8601))")
        let assertion = try SecurityKeyClient.approve(
            document, with: credential, device: try device(), pin: pin, timeoutMilliseconds: timeoutMilliseconds,
            cancellation: cancellation)
        // Abandoned (the console's Esc) after the key answered: what it returned is not used.
        if cancellation?.isCancelled == true { throw CancellationError() }
        request.coApproval = SecondFactorEvidence(document, assertion)
        request.coApprover = session.operatorID
        return try path.execute(request)
    }
}
