import Crypto
import Rollout
import StepUp
import Telemetry
import Timekeeping

/// A two-person request for one of the largest settings changes (App Check ENFORCED, a relaxation of a guardrail
/// or of step-up), recorded in the audit log when the first operator asked with their code, and completed by a
/// second, different enrolled operator with their own code (`rollout approve REQUEST --code CODE`) within 15
/// minutes. The change is applied only if it is still exactly the change asked for (`change`: what it does,
/// from → to), so a request applies at most once: after it, the same change has another `from`.
public struct TwoPersonSettingsRequest: Sendable, Equatable {
    public var id: String
    public var requester: String
    /// What the change does, from → to (`policy set KEY: FROM → TO`, `enforcement SERVICE OFF → ENFORCED`).
    public var change: String
    public var intent: SettingsWritePath.Intent
    public var expiresAt: Instant
    /// Who approved it, when the audit log holds its approval (`find` sets it): a request is used once. The
    /// state check alone did not make it so: with `increase-over` raised 10 → 40 by an approved request, then
    /// put back to 10 by the requester alone (a tightening), the approver approved the same request again and
    /// raised it to 40 once more, a relaxation no second person had agreed to.
    public var approvedBy: String?

    /// The audit record that opens the request.
    func auditEntry(at now: Instant, why: String) -> AuditEntry {
        AuditEntry(
            time: now, actor: requester, action: "two-person request " + change, to: change, result: .recorded,
            detail: "two-person-request \(id); expires-us \(expiresAt.microseconds); expires \(expiresAt.iso8601); "
                + "intent \(Self.encode(intent) ?? "-"); why \(why)")
    }

    /// The request in an audit record written by `auditEntry`; nil for any other record.
    public init?(_ entry: AuditEntry) {
        guard entry.action.hasPrefix("two-person request "), entry.result == .recorded else { return nil }
        var fields: [String: String] = [:]
        for part in entry.detail.split(separator: "; ") {
            let words = part.split(separator: " ", maxSplits: 1).map(String.init)
            if words.count == 2, fields[words[0]] == nil { fields[words[0]] = words[1] }
        }
        guard let id = fields["two-person-request"], let us = fields["expires-us"].flatMap(Int64.init),
            let intent = fields["intent"].flatMap(Self.decode)
        else { return nil }
        self.init(id: id, requester: entry.actor, change: entry.to, intent: intent, expiresAt: Instant(microseconds: us))
    }

    init(id: String, requester: String, change: String, intent: SettingsWritePath.Intent, expiresAt: Instant) {
        self.id = id
        self.requester = requester
        self.change = change
        self.intent = intent
        self.expiresAt = expiresAt
    }

    static func encode(_ intent: SettingsWritePath.Intent) -> String? {
        func hex(_ s: String) -> String { Hex.encode(Array(s.utf8)) }
        switch intent {
        case .setting(let key, let value): return "setting," + hex(key) + "," + hex(value)
        case .appCheck(.enforcementRequest(let service, let from, let to, let reason)):
            return "enforce," + hex(service) + "," + from.rawValue + "," + to.rawValue + "," + hex(reason)
        case .removeOperator(let id): return "remove," + hex(id.rawValue)
        default: return nil
        }
    }

    static func decode(_ text: String) -> SettingsWritePath.Intent? {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        func unhex(_ s: String) -> String? { Hex.decode(s).flatMap { String(validating: $0, as: UTF8.self) } }
        switch parts.first {
        case "setting" where parts.count == 3:
            guard let key = unhex(parts[1]), let value = unhex(parts[2]) else { return nil }
            return .setting(key: key, value: value)
        case "enforce" where parts.count == 5:
            guard let service = unhex(parts[1]), let from = EnforcementMode(rawValue: parts[2]),
                let to = EnforcementMode(rawValue: parts[3]), let reason = unhex(parts[4])
            else { return nil }
            return .appCheck(.enforcementRequest(service: service, from: from, to: to, reason: reason))
        case "remove" where parts.count == 2:
            guard let id = unhex(parts[1]).flatMap({ try? OperatorID($0) }) else { return nil }
            return .removeOperator(id)
        default: return nil
        }
    }

    /// Why setting `key` from `from` to `to` (as `policy show` prints them) weakens a guardrail or a step-up
    /// requirement; nil when it does not (a tightening, or a setting that is neither).
    public static func relaxation(_ key: String, from: String, to: String) -> String? {
        func number(_ s: String) -> Double? { s == "off" ? nil : Double(s) }
        let weakens = "weakens \(key)"
        switch key {
        // Switches whose `off` asks less.
        case "reach-100", "rollback", "import", "force", "guardrail-override", "policy-change", "operator-enroll",
            "appcheck", "increase-reason", "two-person", "guardrails.armed", "guardrails.auto-kill":
            return from == "on" && to == "off" ? weakens : nil
        // Larger is looser (`off` is the loosest for increase-over).
        case "increase-over":
            if to == "off" { return from == "off" ? nil : weakens }
            guard let f = number(from), let t = number(to) else { return nil }
            return t > f ? weakens : nil
        case "lockout-attempts", "budget.per-second", "budget.per-day", "budget.peak-to-average",
            "telemetry.stale-after-minutes", "crash.detectable-effect-percent", "failures.ceiling-percent",
            "failures.halt-ceiling-percent":
            guard let f = number(from), let t = number(to) else { return nil }
            return t > f ? weakens : nil
        // Smaller is looser.
        case "lockout-minutes", "enforcement.ok-for-minutes":
            guard let f = number(from), let t = number(to) else { return nil }
            return t < f ? weakens : nil
        case "cross":
            let before = Set(from == "off" ? [] : from.split(separator: ",").map(String.init))
            let after = Set(to == "off" ? [] : to.split(separator: ",").map(String.init))
            return before.isSubset(of: after) ? nil : weakens
        // A fixed failure baseline: a larger one makes the class's alarm slower to fire. `frozen` (learned from the
        // first window) may be either side of a number, so only a lower number than before is a tightening.
        case let k where k.hasPrefix("failures.baseline-percent."):
            guard let f = Double(from), let t = Double(to) else { return weakens }
            return t > f ? weakens : nil
        // A method list that accepts a method it did not accept before.
        case let k where k.hasPrefix("step-up."):
            func methods(_ s: String) -> Set<String> {
                s == "any" ? Set(StepUpMethod.allCases.map(\.rawValue)) : Set(s.split(separator: ",").map(String.init))
            }
            return methods(to).isSubset(of: methods(from)) ? nil : weakens
        // A key this list does not know yet is held until someone decides which way it loosens.
        default:
            return weakens
        }
    }

    /// The newest request `id` in `session`'s audit log, nil when none (see `find(_:pages:)`). When the chain
    /// breaks on the way to it, the attempt is audited (`two-person approve ID`, refused, `result not-in-chain`)
    /// before the break is thrown: an approval asked of a planted request is worth a line in the log it forged.
    public static func find(_ id: String, in session: RolloutSession) throws -> TwoPersonSettingsRequest? {
        do {
            return try find(id) { try session.templates.auditRecords(limit: 1000, before: $0) }
        } catch let broken as AuditChain.Break {
            let path = try session.settingsWritePath()
            if !path.backend.isReadOnly {
                try path.backend.transaction {
                    try $0.appendAudit(
                        AuditEntry(
                            time: session.clock.now(), actor: session.operatorID, action: "two-person approve \(id)",
                            result: .stepUpRefused, detail: "result not-in-chain; two-person-request \(id); \(broken)"))
                }
            }
            throw broken
        }
    }

    /// The newest request `id` in an audit log read newest first, a page at a time (`pages(before)`); nil when
    /// none. A request is believed only as a link of the chain that ends at the log's head, which every write
    /// checks against the seal: each record from the head down to the request must hash as it says, and be what
    /// the next newer record names as its predecessor, one sequence number below it. A record planted in the log
    /// or an old one edited (a shell on the store file, the writer role's INSERT) breaks that, and the walk
    /// throws the break instead of reading the record as someone's request.
    public static func find(_ id: String, pages: (_ before: Int64?) throws -> [AuditRecord]) throws
        -> TwoPersonSettingsRequest?
    {
        var before: Int64? = nil
        var newer: AuditRecord? = nil
        // The approval of the request, if any, is newer than the request: seen on the way down to it.
        var approvedBy: String? = nil
        while true {
            let page = try pages(before)
            for record in page {
                if let newer {
                    guard record.sequence == newer.sequence - 1 else {
                        throw AuditChain.Break(
                            sequence: record.sequence,
                            problem: "out of order: found below record \(newer.sequence), which follows \(newer.sequence - 1)")
                    }
                    guard record.hash == newer.previousHash else {
                        throw AuditChain.Break(
                            sequence: record.sequence,
                            problem: "is not the predecessor record \(newer.sequence) names (edited or planted)")
                    }
                } else if record.sequence < 1 {
                    throw AuditChain.Break(sequence: record.sequence, problem: "out of order (found \(record.sequence))")
                }
                guard AuditChain.hash(sequence: record.sequence, entry: record.entry, previousHash: record.previousHash)
                    == record.hash
                else { throw AuditChain.Break(sequence: record.sequence, problem: "content does not match its hash (edited)") }
                if record.sequence == 1, record.previousHash != AuditChain.genesis {
                    throw AuditChain.Break(sequence: 1, problem: "does not start the chain")
                }
                if var request = TwoPersonSettingsRequest(record.entry), request.id == id {
                    request.approvedBy = approvedBy
                    return request
                }
                if record.entry.result == .stepUpAccepted,
                    record.entry.detail.hasPrefix("result approved; two-person-request \(id);")
                {
                    approvedBy = record.entry.actor
                }
                newer = record
            }
            guard let last = page.last, page.count == 1000 else { return nil }
            before = last.sequence
        }
    }
}
