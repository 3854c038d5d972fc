import Glibc
import Platform
import Rollout
import Timekeeping

/// Which changes need a fresh one-time code, and how wrong codes are punished; stored in the store.
///
/// The defaults follow the issue: a code for an increase of more than 10 points, for a change that crosses 50%
/// or reaches 100%, for a rollback, for `--force`, for a guardrail override and for any policy change; never for
/// a kill or a decrease. Two rules go beyond the issue: a template import needs a code like a rollback (both can
/// change anything), and enrolling another operator needs an enrolled operator's code, or anyone able to write
/// the store could enrol a fresh identity and pass every check with it.
///
/// The policy applies only while step-up is enforced, that is while at least one operator is enrolled.
/// Every setting has a textual key (`settings`, `setting(_:_:)`) used by `rollout policy show|set` and by the
/// store, so the CLI, the store and the JSON output spell a rule the same way.
public struct StepUpPolicy: Sendable, Equatable {
    /// An increase of strictly more than this many micro-percent needs a code; nil turns the rule off.
    public var largeIncrease: Int64? = 10_000_000
    /// Thresholds (micro-percent) whose upward crossing needs a code: `from <= t < to`.
    public var crossings: [Int64] = [50_000_000]
    /// Raising the percentage to 100% needs a code.
    public var reachingFull = true
    /// A rollback to an earlier template version needs a code (it can change more than the percentage).
    public var rollback = true
    /// Importing a whole template needs a code (like a rollback, it can change anything).
    public var importTemplate = true
    /// `--force` (publishing over a concurrent change) needs a code.
    public var force = true
    /// Publishing despite a guardrail's HOLD or HALT needs a code.
    public var guardrailOverride = true
    /// Changing this policy needs a code (judged by the policy in force before the change).
    public var policyChange = true
    /// Enrolling another operator needs the code of an enrolled one.
    public var operatorEnrolment = true
    /// An App Check registration needs a code: an app (and its trust of the demo authority), a debug token (a
    /// credential), a signing key rotation; each decides what `serve` accepts or mints.
    public var appCheckChange = true
    /// Every increase of exposure needs a reason, on every path (enforced by the write path).
    public var reasonForIncrease = true
    /// Reaching 100% needs two operators: the security key of the one who asks, then a second, different
    /// operator's key over the same change document (`rollout approve REQUEST`). Off until set.
    public var twoPerson = false
    /// The methods each protected change kind accepts (`step-up.KIND`, e.g. `step-up.reach-100 security-key`),
    /// for the kinds `policy set` has named; a kind not named accepts every method. Only changes of the rollout
    /// write path take a list (`methodKinds`): settings changes are approved by one-time codes.
    public var methods: [String: Set<StepUpMethod>] = [:]
    /// Consecutive wrong codes that lock an operator out.
    public var lockoutAttempts = 3
    /// How long a lockout lasts.
    public var lockoutDuration: Instant.Duration = .minutes(15)

    public init() {}

    /// The default policy.
    public static let standard = StepUpPolicy()

    /// One setting as `policy show` prints it.
    public struct Setting: Sendable, Equatable {
        public var key: String
        public var value: String
        public var help: String
    }

    /// The settings keys in display order.
    public static let keys = [
        "increase-over", "cross", "reach-100", "rollback", "import", "force", "guardrail-override", "policy-change",
        "operator-enroll", "appcheck", "increase-reason", "two-person", "lockout-attempts", "lockout-minutes",
    ]

    /// The change kinds that take a method list (`step-up.KIND`): the changes of the rollout write path.
    public static let methodKinds = [
        "increase-over", "cross", "reach-100", "rollback", "import", "force", "guardrail-override", "rollout-change",
    ]

    /// The methods `reason` accepts under this policy.
    public func allowedMethods(for reason: StepUpReason) -> Set<StepUpMethod> {
        let listed = methods[reason.policyKind] ?? Set(StepUpMethod.allCases)
        // Under the two-person rule, reaching 100% needs two security keys over the same change document: a
        // one-time code or a phone alone would publish it with one person.
        if twoPerson, reason == .reachesFull { return listed.intersection([.securityKey]) }
        return listed
    }

    /// The first of `reasons` that does not accept `method`, with what it accepts; nil when all accept it.
    public func methodRefusal(_ method: StepUpMethod, for reasons: [StepUpReason]) -> (StepUpReason, [StepUpMethod])? {
        for reason in reasons where !allowedMethods(for: reason).contains(method) {
            return (reason, allowedMethods(for: reason).sorted())
        }
        return nil
    }

    /// Every setting with its current value, in `keys` order (then the method lists that were set).
    public var settings: [Setting] {
        base + methods.keys.sorted().map { kind in
            Setting(
                key: "step-up." + kind, value: Self.methodList(methods[kind]!),
                help: "the step-up methods a '\(kind)' change accepts (any, or a comma list of totp, phone, security-key)")
        }
    }

    static func methodList(_ set: Set<StepUpMethod>) -> String {
        set.count == StepUpMethod.allCases.count ? "any" : set.sorted().map(\.rawValue).joined(separator: ",")
    }

    private var base: [Setting] {
        [
            Setting(
                key: "increase-over", value: largeIncrease.map { Percent.format($0, sign: false) } ?? "off",
                help: "a code for an increase of more than this many points (a number or off)"),
            Setting(
                key: "cross",
                value: crossings.isEmpty
                    ? "off" : crossings.map { Percent.format($0, sign: false) }.joinedText(","),
                help: "a code for an increase that goes past these percentages (comma list or off)"),
            Setting(
                key: "reach-100", value: Self.onOff(reachingFull), help: "a code for raising the percentage to 100"),
            Setting(key: "rollback", value: Self.onOff(rollback), help: "a code for a rollback to an earlier version"),
            Setting(key: "import", value: Self.onOff(importTemplate), help: "a code for importing a whole template"),
            Setting(
                key: "force", value: Self.onOff(force), help: "a code for --force (publishing over another change)"),
            Setting(
                key: "guardrail-override", value: Self.onOff(guardrailOverride),
                help: "a code for publishing despite a guardrail verdict"),
            Setting(
                key: "policy-change", value: Self.onOff(policyChange), help: "a code for any change to this policy"),
            Setting(
                key: "operator-enroll", value: Self.onOff(operatorEnrolment),
                help: "an enrolled operator's code for enrolling another operator"),
            Setting(
                key: "appcheck", value: Self.onOff(appCheckChange),
                help: "a code for App Check registrations: apps, demo trust, debug tokens, key rotation"),
            Setting(
                key: "increase-reason", value: Self.onOff(reasonForIncrease),
                help: "a reason (--reason) for every increase of exposure, on every path"),
            Setting(
                key: "two-person", value: Self.onOff(twoPerson),
                help: "reaching 100% needs a second operator's security key over the same change (rollout approve)"),
            Setting(
                key: "lockout-attempts", value: String(lockoutAttempts),
                help: "consecutive wrong codes that lock an operator out (1-100)"),
            Setting(
                key: "lockout-minutes", value: String(lockoutDuration.microseconds / 60_000_000),
                help: "how long a lockout lasts, in minutes (1-1440)"),
        ]
    }

    /// This policy with `key` set to `value`; the error names the key and the values it takes.
    public func setting(_ key: String, _ value: String) throws(StepUpPolicyError) -> StepUpPolicy {
        var p = self
        let v = value.trimmingSpaces().lowercased()
        func flag() throws(StepUpPolicyError) -> Bool {
            switch v {
            case "on", "true", "yes": return true
            case "off", "false", "no": return false
            default: throw StepUpPolicyError("\(key) takes on or off, not '\(value)'")
            }
        }
        func integer(_ range: ClosedRange<Int>) throws(StepUpPolicyError) -> Int {
            guard let n = Int(v), range.contains(n) else {
                throw StepUpPolicyError(
                    "\(key) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(value)'")
            }
            return n
        }
        if key.hasPrefix("step-up.") {
            let kind = String(key.dropFirst("step-up.".count))
            guard Self.methodKinds.contains(kind) else {
                if Self.keys.contains(kind) {
                    throw StepUpPolicyError(
                        "\(key): '\(kind)' changes are approved by a one-time code only; the kinds that take a method "
                            + "list are: \(Self.methodKinds.joined(separator: ", "))")
                }
                throw StepUpPolicyError(
                    "unknown change kind in '\(key)'; the kinds are: \(Self.methodKinds.joined(separator: ", "))")
            }
            if v == "any" {
                p.methods[kind] = Set(StepUpMethod.allCases)
                return p
            }
            var set: Set<StepUpMethod> = []
            for name in v.split(separator: ",", omittingEmptySubsequences: false) {
                guard let m = StepUpMethod(rawValue: name.trimmingSpaces()) else {
                    throw StepUpPolicyError(
                        "\(key) takes any or a comma list of totp, phone, security-key; not '\(value)'")
                }
                set.insert(m)
            }
            p.methods[kind] = set
            return p
        }
        switch key {
        case "increase-over":
            if v == "off" {
                p.largeIncrease = nil
            } else {
                guard let m = Percent.parse(v), m < 100_000_000 else {
                    throw StepUpPolicyError("increase-over takes points from 0 to 99.999999 or off, not '\(value)'")
                }
                p.largeIncrease = m
            }
        case "cross":
            if v == "off" {
                p.crossings = []
            } else {
                var thresholds: [Int64] = []
                for part in v.split(separator: ",", omittingEmptySubsequences: false) {
                    guard let m = Percent.parse(part.trimmingSpaces()), m > 0, m < 100_000_000
                    else {
                        throw StepUpPolicyError(
                            "cross takes percentages between 0 and 100 (exclusive) separated by commas, or off; not '\(value)'"
                        )
                    }
                    thresholds.append(m)
                }
                p.crossings = Array(Set(thresholds)).sorted()
            }
        case "reach-100": p.reachingFull = try flag()
        case "rollback": p.rollback = try flag()
        case "import": p.importTemplate = try flag()
        case "force": p.force = try flag()
        case "guardrail-override": p.guardrailOverride = try flag()
        case "policy-change": p.policyChange = try flag()
        case "operator-enroll": p.operatorEnrolment = try flag()
        case "appcheck": p.appCheckChange = try flag()
        case "increase-reason": p.reasonForIncrease = try flag()
        case "two-person": p.twoPerson = try flag()
        case "lockout-attempts": p.lockoutAttempts = try integer(1...100)
        case "lockout-minutes": p.lockoutDuration = .minutes(Int64(try integer(1...1440)))
        default:
            throw StepUpPolicyError(
                "unknown step-up policy key '\(key)'; the keys are: \(Self.keys.joined(separator: ", ")), step-up.KIND")
        }
        return p
    }

    /// A policy from stored settings; keys that are absent keep their defaults.
    public init(settings: [String: String]) throws(StepUpPolicyError) {
        var p = StepUpPolicy()
        for key in settings.keys.sorted() { p = try p.setting(key, settings[key]!) }
        self = p
    }

    private static func onOff(_ b: Bool) -> String { b ? "on" : "off" }
}

/// How an operator proves at the device that it is them, for one change.
public enum StepUpMethod: String, Sendable, CaseIterable, Comparable {
    /// A one-time code from an authenticator app (`--code`).
    case totp
    /// A code sent by SMS or a voice call (`--phone`).
    case phone
    /// A FIDO2 security key's signature over the change document (`--security-key`).
    case securityKey = "security-key"

    public static func < (a: StepUpMethod, b: StepUpMethod) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }

    /// The option that uses it on a write.
    public var option: String {
        switch self {
        case .totp: "--code CODE"
        case .phone: "--phone"
        case .securityKey: "--security-key"
        }
    }
}

/// A policy setting that cannot be applied, with the keys or values that would work.
public struct StepUpPolicyError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Percentages as the rollout writes them: micro-percent integers (1% = 1_000_000), 6 decimals at most.
enum Percent {
    /// Parses `12`, `12.5`, `0.000001` or `12.5%` into micro-percent within 0...100%; nil otherwise.
    static func parse(_ text: String) -> Int64? {
        var t = Substring(text)
        if t.hasSuffix("%") { t = t.dropLast() }
        let parts = t.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 3, whole.allSatisfy(\.isASCIIDigit) else {
            return nil
        }
        var micro = Int64(whole)! * 1_000_000
        if parts.count == 2 {
            let fraction = parts[1]
            guard !fraction.isEmpty, fraction.count <= 6, fraction.allSatisfy(\.isASCIIDigit) else { return nil }
            micro += Int64(fraction + String(repeating: "0", count: 6 - fraction.count))!
        }
        return micro <= 100_000_000 ? micro : nil
    }

    /// `12.5%` for 12_500_000 (no trailing zeros); with `sign`, a `%` suffix.
    static func format(_ micro: Int64, sign: Bool = true) -> String {
        let whole = micro / 1_000_000
        var fraction = String(abs(micro % 1_000_000))
        var text = String(whole)
        if micro % 1_000_000 != 0 {
            fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
            while fraction.hasSuffix("0") { fraction.removeLast() }
            text = (micro < 0 && whole == 0 ? "-" : "") + text + "." + fraction
        }
        return sign ? text + "%" : text
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
