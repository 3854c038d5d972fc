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

    /// The newest request `id` in `session`'s audit log, nil when none.
    public static func find(_ id: String, in session: RolloutSession) throws -> TwoPersonSettingsRequest? {
        var before: Int64? = nil
        while true {
            let page = try session.templates.auditRecords(limit: 1000, before: before)
            for record in page {
                if let request = TwoPersonSettingsRequest(record.entry), request.id == id { return request }
            }
            guard let last = page.last, page.count == 1000 else { return nil }
            before = last.sequence
        }
    }
}
