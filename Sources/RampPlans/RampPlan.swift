import Platform
import RemoteConfig
import Timekeeping

/// A ramp plan: the steps a rollout takes by itself, the gates each step must pass before the next, and what
/// to do when the verdict is not OK.
///
/// Written as a small text file, one statement a line (`#` starts a comment):
///
/// ```
/// name ramp
/// # defaults for every step; a step line may override any of them
/// gate ok-for 30m              # the verdict has been OK for 30 minutes (telemetry time)
/// gate users 500               # at least 500 exposed users counted since the rollout start
/// gate sessions 2000           # at least 2,000 exposed sessions
/// gate propagation 90%         # ≥ 90% of active devices run the newest template version
/// gate load 80%                # observed attestation rate ≤ 80% of the budget (Apple's guidance)
/// gate window 09:00-17:00      # advance only between these UTC times of day (may wrap midnight)
/// timeout 6h                   # a step not passed within hold + 6h pauses the plan with an alert
/// on watch pause               # pause | wait
/// on hold wait                 # wait | pause
/// on halt kill                 # kill | pause
/// step 5%  hold 1h
/// step 10% hold 1h users 1000
/// step 25% hold 2h
/// step 100%
/// step enforce firestore.googleapis.com   # App Check enforcement, after the last step's hold and gates
/// ```
///
/// Steps are strictly increasing percentages (each parsed by `MicroPercent.parse`). A step's hold and gates
/// decide when the plan leaves it for the next step; the plan is done when its last step is published.
///
/// A plan whose last step is 100% may end with `step enforce SERVICE` lines: once the last step has passed its
/// hold and gates, the plan sets each service ENFORCED in turn, through the same rules as `rollout enforcement
/// set` (the enforcement gate, step-up, the audit log). They take no gates of their own.
public struct RampPlan: Hashable, Sendable {
    public var name: String
    public var steps: [RampStep]
    /// The services set ENFORCED, in order, after the last step (App Check enforcement, the ramp's last stage).
    public var enforcements: [String]
    public var actions: RampActions
    /// The file as given (stored with the plan, shown by `plan status`).
    public var source: String

    public init(
        name: String, steps: [RampStep], enforcements: [String] = [], actions: RampActions = RampActions(),
        source: String = ""
    ) {
        self.name = name
        self.steps = steps
        self.enforcements = enforcements
        self.actions = actions
        self.source = source
    }
}

/// One step: the percentage to publish, then how long to stay at least and what must hold before the next.
public struct RampStep: Hashable, Sendable {
    public var target: MicroPercent
    public var hold: Instant.Duration
    public var gates: RampGates
    /// Pause with an alert when the step has not passed its gates by hold + timeout (nil: wait forever).
    public var timeout: Instant.Duration?
    /// The line of the plan file.
    public var line: Int

    public init(
        target: MicroPercent, hold: Instant.Duration = .seconds(Int64(0)), gates: RampGates = RampGates(),
        timeout: Instant.Duration? = nil, line: Int = 0
    ) {
        self.target = target
        self.hold = hold
        self.gates = gates
        self.timeout = timeout
        self.line = line
    }
}

/// What must be true at a step before the plan goes on to the next one. nil: not checked.
public struct RampGates: Hashable, Sendable {
    /// The verdict has been OK continuously for this long.
    public var okFor: Instant.Duration?
    public var minimumExposedUsers: Int64?
    public var minimumExposedSessions: Int64?
    /// Share of active devices on the newest template version, as a percentage.
    public var minimumPropagation: MicroPercent?
    /// The observed attestation rate as a share of the budget, as a percentage.
    public var maximumLoad: MicroPercent?
    public var window: TimeOfDayWindow?

    public init(
        okFor: Instant.Duration? = nil, minimumExposedUsers: Int64? = nil, minimumExposedSessions: Int64? = nil,
        minimumPropagation: MicroPercent? = nil, maximumLoad: MicroPercent? = nil, window: TimeOfDayWindow? = nil
    ) {
        self.okFor = okFor
        self.minimumExposedUsers = minimumExposedUsers
        self.minimumExposedSessions = minimumExposedSessions
        self.minimumPropagation = minimumPropagation
        self.maximumLoad = maximumLoad
        self.window = window
    }
}

/// UTC minutes of the day `[start, end)`; `start > end` wraps midnight.
public struct TimeOfDayWindow: Hashable, Sendable, CustomStringConvertible {
    public var startMinute: Int
    public var endMinute: Int

    public init(startMinute: Int, endMinute: Int) {
        self.startMinute = startMinute
        self.endMinute = endMinute
    }

    public func contains(_ t: Instant) -> Bool {
        let m = Int(((t.seconds % 86_400) + 86_400) % 86_400 / 60)
        return startMinute <= endMinute ? (m >= startMinute && m < endMinute) : (m >= startMinute || m < endMinute)
    }

    public var description: String {
        func hm(_ m: Int) -> String {
            (m / 60 < 10 ? "0" : "") + "\(m / 60):" + (m % 60 < 10 ? "0" : "") + "\(m % 60)"
        }
        return "\(hm(startMinute))-\(hm(endMinute)) UTC"
    }
}

/// What the plan does on a verdict that is not OK, and on a timeout (always: pause and alert).
public struct RampActions: Hashable, Sendable {
    public enum OnVerdict: String, Hashable, Sendable { case wait, pause, kill }
    public var onWatch: OnVerdict
    public var onHold: OnVerdict
    public var onHalt: OnVerdict

    public init(onWatch: OnVerdict = .pause, onHold: OnVerdict = .wait, onHalt: OnVerdict = .kill) {
        self.onWatch = onWatch
        self.onHold = onHold
        self.onHalt = onHalt
    }
}

/// A plan file that cannot be read, with the line (1-based) that is wrong.
public struct RampPlanError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var message: String
    public init(line: Int, _ message: String) {
        self.line = line
        self.message = message
    }
    public var description: String { line > 0 ? "line \(line): \(message)" : message }
}

extension RampPlan {
    /// The largest plan file read, in bytes: a plan is a few dozen lines, and the store keeps its text.
    public static let maximumBytes = 64 * 1024

    /// Reads a plan file; every mistake is reported with its line, quoting at most an excerpt of the text.
    public static func parse(_ text: String) throws(RampPlanError) -> RampPlan {
        guard text.utf8.count <= maximumBytes else {
            throw RampPlanError(
                line: 0, "the plan is \(text.utf8.count) bytes; a plan file is at most \(maximumBytes / 1024) KiB")
        }
        var name: String?
        var defaults = RampGates()
        var timeout: Instant.Duration?
        var actions = RampActions()
        // Step lines are read after the defaults, wherever the defaults appear.
        var stepLines: [(Int, [Substring])] = []
        for (index, raw) in text.textFileLines().enumerated() {
            let n = index + 1
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            guard let keyword = words.first else { continue }
            let rest = Array(words.dropFirst())
            switch keyword {
            case "name":
                guard rest.count == 1, rest[0].count <= 64,
                    rest[0].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) })
                else {
                    throw RampPlanError(
                        line: n, "'name' takes one word of letters, digits, '-', '_' or '.' (at most 64)")
                }
                guard name == nil else { throw RampPlanError(line: n, "the plan already has a name") }
                name = String(rest[0])
            case "gate":
                guard rest.count == 2 else {
                    throw RampPlanError(line: n, "'gate' takes a name and a value, e.g. gate users 500")
                }
                try apply(rest[0], rest[1], to: &defaults, line: n)
            case "timeout":
                guard rest.count == 1 else {
                    throw RampPlanError(line: n, "'timeout' takes a duration, e.g. timeout 6h")
                }
                timeout = try positive(rest[0], line: n)
            case "on":
                guard rest.count == 2 else {
                    throw RampPlanError(line: n, "'on' takes a verdict and an action, e.g. on watch pause")
                }
                let action = RampActions.OnVerdict(rawValue: String(rest[1]))
                switch (rest[0], action) {
                case ("watch", .pause?), ("watch", .wait?): actions.onWatch = action!
                case ("hold", .pause?), ("hold", .wait?): actions.onHold = action!
                case ("halt", .kill?), ("halt", .pause?): actions.onHalt = action!
                case ("watch", _), ("hold", _):
                    throw RampPlanError(line: n, "on \(rest[0]): the action is 'pause' or 'wait', not \(rest[1].quotedExcerpt())")
                case ("halt", _):
                    throw RampPlanError(line: n, "on halt: the action is 'kill' or 'pause', not \(rest[1].quotedExcerpt())")
                default: throw RampPlanError(line: n, "'on' takes watch, hold or halt, not \(rest[0].quotedExcerpt())")
                }
            case "step":
                stepLines.append((n, rest))
            default:
                throw RampPlanError(line: n, "unknown statement \(keyword.quotedExcerpt()) (name, gate, timeout, on, step)")
            }
        }
        var steps: [RampStep] = []
        var enforcements: [String] = []
        for (n, words) in stepLines {
            guard let first = words.first else {
                throw RampPlanError(line: n, "'step' needs a percentage, e.g. step 10% hold 1h")
            }
            if first == "enforce" {
                enforcements.append(try enforcement(Array(words.dropFirst()), after: steps, seen: enforcements, line: n))
                continue
            }
            guard enforcements.isEmpty else {
                throw RampPlanError(line: n, "a percentage step after 'step enforce': enforcement comes last")
            }
            var step = RampStep(target: try percentage(first, line: n), gates: defaults, timeout: timeout, line: n)
            guard step.target > .zero else { throw RampPlanError(line: n, "a step's percentage must be above 0%") }
            if let previous = steps.last, step.target <= previous.target {
                throw RampPlanError(
                    line: n, "steps must go up: \(step.target) after \(previous.target) (line \(previous.line))")
            }
            var rest = words.dropFirst()
            while let key = rest.first {
                rest = rest.dropFirst()
                switch key {
                case "protected":
                    throw RampPlanError(
                        line: n,
                        "'protected' is not written in the plan: the step-up policy decides which steps need a code")
                default:
                    guard let value = rest.first else { throw RampPlanError(line: n, "\(key.quotedExcerpt()) needs a value") }
                    rest = rest.dropFirst()
                    switch key {
                    case "hold": step.hold = try duration(value, line: n)
                    case "timeout": step.timeout = try positive(value, line: n)
                    default: try apply(key, value, to: &step.gates, line: n)
                    }
                }
            }
            steps.append(step)
        }
        guard let name else { throw RampPlanError(line: 0, "the plan has no 'name' line") }
        guard !steps.isEmpty else { throw RampPlanError(line: 0, "the plan has no 'step' line") }
        return RampPlan(name: name, steps: steps, enforcements: enforcements, actions: actions, source: text)
    }

    /// `step enforce SERVICE`: after a last step of 100%, once per service, a service id such as
    /// `firestore.googleapis.com`.
    private static func enforcement(_ words: [Substring], after steps: [RampStep], seen: [String], line n: Int)
        throws(RampPlanError) -> String
    {
        guard words.count == 1 else {
            throw RampPlanError(
                line: n, "'step enforce' takes one service and nothing else, e.g. step enforce firestore.googleapis.com")
        }
        let service = String(words[0])
        guard service.count <= 128, service.contains("."),
            service.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "." || $0 == "-") })
        else {
            throw RampPlanError(
                line: n, "\(words[0].quotedExcerpt()) is not a service id such as firestore.googleapis.com")
        }
        guard let last = steps.last, last.target == .hundred else {
            throw RampPlanError(
                line: n, "'step enforce' needs a step of 100% before it: enforcement comes after everyone has the flag")
        }
        guard !seen.contains(service) else { throw RampPlanError(line: n, "\(service) is enforced twice") }
        return service
    }

    private static func apply(_ key: Substring, _ value: Substring, to gates: inout RampGates, line n: Int)
        throws(RampPlanError)
    {
        switch key {
        case "ok-for": gates.okFor = try duration(value, line: n)
        case "users": gates.minimumExposedUsers = try count(value, line: n)
        case "sessions": gates.minimumExposedSessions = try count(value, line: n)
        case "propagation": gates.minimumPropagation = try percentage(value, line: n)
        case "load": gates.maximumLoad = try percentage(value, line: n)
        case "window": gates.window = try window(value, line: n)
        default:
            throw RampPlanError(
                line: n,
                "unknown gate \(key.quotedExcerpt()) (ok-for, users, sessions, propagation, load, window; on a step also hold, timeout)"
            )
        }
    }

    private static func percentage(_ text: Substring, line n: Int) throws(RampPlanError) -> MicroPercent {
        let bare = text.hasSuffix("%") ? String(text.dropLast()) : String(text)
        do { return try MicroPercent.parsePercentage(bare) } catch { throw RampPlanError(line: n, error.description) }
    }

    private static func duration(_ text: Substring, line n: Int) throws(RampPlanError) -> Instant.Duration {
        do { return try Instant.Duration.parse(String(text)) } catch { throw RampPlanError(line: n, error.description) }
    }

    private static func positive(_ text: Substring, line n: Int) throws(RampPlanError) -> Instant.Duration {
        let d = try duration(text, line: n)
        guard d.microseconds > 0 else { throw RampPlanError(line: n, "\(text.quotedExcerpt()) must be longer than 0s") }
        return d
    }

    private static func count(_ text: Substring, line n: Int) throws(RampPlanError) -> Int64 {
        guard let v = Int64(text), v >= 0 else { throw RampPlanError(line: n, "\(text.quotedExcerpt()) is not a whole number ≥ 0") }
        return v
    }

    private static func window(_ text: Substring, line n: Int) throws(RampPlanError) -> TimeOfDayWindow {
        func minute(_ s: Substring) -> Int? {
            let hm = s.split(separator: ":", omittingEmptySubsequences: false)
            guard hm.count == 2, hm[0].count == 2, hm[1].count == 2, let h = Int(hm[0]), let m = Int(hm[1]),
                (0...24).contains(h),
                (0..<60).contains(m), h * 60 + m <= 1440
            else { return nil }
            return h * 60 + m
        }
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        // 24:00 ends a day; as a start it is the next day's 00:00 (24:00-00:00 is then empty, and refused).
        guard parts.count == 2, let a = minute(parts[0]).map({ $0 % 1440 }), let b = minute(parts[1]), a != b else {
            throw RampPlanError(line: n, "\(text.quotedExcerpt()) is not a time-of-day window such as 09:00-17:00 (UTC)")
        }
        return TimeOfDayWindow(startMinute: a, endMinute: b)
    }
}
