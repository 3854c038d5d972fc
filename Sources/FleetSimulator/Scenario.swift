import Glibc
import Platform
import RemoteConfig
import Timekeeping

/// A new app build that devices adopt over time.
public struct AppRelease: Hashable, Sendable {
    public var version: String
    /// Share of the devices still on an older build that update per hour (exponential adoption).
    public var adoptionPerHour: Double
    /// Extra fatal crashes per session on this build, for everybody (a bad build, not the rollout).
    public var crashRate: Double
    /// The App ID (`TEAMID.bundle.id`) this build signs its App Attest keys for; nil = the app's own. A wrong
    /// one makes the exchange reject every new attestation from the build (a build signed by the wrong team).
    public var appID: String?

    public init(version: String, adoptionPerHour: Double = 0.3, crashRate: Double = 0, appID: String? = nil) {
        self.version = version
        self.adoptionPerHour = adoptionPerHour
        self.crashRate = crashRate
        self.appID = appID
    }
}

/// Something a scenario does at a simulated time.
public enum ScenarioAction: Hashable, Sendable, CustomStringConvertible {
    /// Change a parameter (`apple-capacity 5/s`); the text was checked when the scenario was read.
    case parameter(name: String, value: String)
    /// Publish the rollout percentage through the write path, as an operator would.
    case rollout(MicroPercent)
    case kill
    case resume
    case release(AppRelease)

    public var description: String {
        switch self {
        case .parameter(let n, let v): "\(n) \(v)"
        case .rollout(let p): "rollout \(p)"
        case .kill: "kill"
        case .resume: "resume"
        case .release(let r):
            "release \(r.version)" + (r.crashRate > 0 ? " crash-rate \(r.crashRate * 100)%" : "")
                + (r.appID.map { " app-id \($0)" } ?? "")
        }
    }
}

/// An action and when it happens, as an offset from the start of the run.
public struct ScheduledAction: Hashable, Sendable {
    public var offset: Instant.Duration
    public var action: ScenarioAction
    /// The line of the scenario file it came from.
    public var line: Int
}

/// A scenario: the fleet's parameters and what happens when, read from a small text file.
///
/// ```
/// # comments start with '#'
/// summary  A healthy rollout held at 10%.
/// duration 2h
/// devices  20000
/// crash-rate 0.2%
/// rollout 10%                 # published at the start
/// at 1h apple-capacity 5/s    # a fault at one hour
/// at 1h20m apple-capacity 100/s
/// at 30m release 3.2.0 adoption 40%/h crash-rate 1%
/// ```
///
/// Lines: `name`, `summary`, `duration`, `start` (ISO 8601; default: the wall time when the run starts),
/// `devices`, `rollout-seed` (the percent condition's seed for a store that has no rollout yet), `demo-speed`
/// (the speed of `rollout demo` without `--speed`), a parameter
/// with its value (see `FleetParameters.definitions`), `rollout P%`, and `at OFFSET ...` with a changeable
/// parameter, `rollout P%`, `kill`, `resume` or `release VERSION [adoption R%/h] [crash-rate X%] [app-id ID]`.
public struct Scenario: Hashable, Sendable {
    public var name: String
    public var summary = ""
    public var duration: Instant.Duration = .hours(2)
    /// When simulated time starts; nil = the wall time when the run starts.
    public var start: Instant?
    /// The fleet size when the command line does not give one.
    public var devices = 10_000
    public var rolloutSeed = "rollout-sim"
    /// The speed `rollout demo` runs it at when `--speed` is not given (`demo-speed 600x`); nil: 60x.
    public var demoSpeed: SimulationSpeed?
    public var parameters = FleetParameters()
    /// In time order; actions at the same offset keep their order in the file.
    public var schedule: [ScheduledAction] = []

    public init(name: String) { self.name = name }

    /// Reads a scenario from its text; `name` is used unless the text names itself.
    public static func parse(_ text: String, name: String) throws(ScenarioError) -> Scenario {
        var s = Scenario(name: name)
        for (i, raw) in text.textFileLines().enumerated() {
            let line = i + 1
            let content = raw.prefix { $0 != "#" }.trimmingSpaces()
            if content.isEmpty { continue }
            let words = content.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            do throws(ScenarioValueError) {
                try s.read(words, line: line)
            } catch {
                throw ScenarioError(scenario: name, line: line, message: error.description)
            }
        }
        s.schedule = s.schedule.enumerated().sorted { a, b in
            (a.element.offset, a.offset) < (b.element.offset, b.offset)
        }.map(\.element)
        return s
    }

    private mutating func read(_ words: [String], line: Int) throws(ScenarioValueError) {
        let keyword = words[0]
        let rest = words.dropFirst().joined(separator: " ")
        func value() throws(ScenarioValueError) -> String {
            guard !rest.isEmpty else { throw ScenarioValueError("'\(keyword)' needs a value") }
            return rest
        }
        switch keyword {
        case "name": name = try value()
        case "summary": summary = try value()
        case "duration": duration = try ScenarioValues.positiveDuration(try value())
        case "start":
            guard let t = ISO8601.parse(try value()) else {
                throw ScenarioValueError("'\(rest)' is not an ISO 8601 time such as 2026-05-20T09:00:00Z")
            }
            start = t
        case "devices":
            guard let n = Int(try value()), n > 0, n <= 50_000_000 else {
                throw ScenarioValueError("devices must be a whole number from 1 to 50,000,000")
            }
            devices = n
        case "rollout-seed": rolloutSeed = try value()
        case "demo-speed":
            guard let speed = SimulationSpeed(try value()) else {
                throw ScenarioValueError("demo-speed is simulated seconds per second, such as 600x, or max")
            }
            demoSpeed = speed
        case "at":
            guard words.count >= 3 else {
                throw ScenarioValueError("'at' needs a time and an action, e.g. at 30m rollout 20%")
            }
            let offset = try ScenarioValues.duration(words[1])
            schedule.append(ScheduledAction(offset: offset, action: try action(Array(words.dropFirst(2))), line: line))
        case "rollout", "kill", "resume", "release":
            schedule.append(
                ScheduledAction(offset: Instant.Duration(microseconds: 0), action: try action(words), line: line))
        default:
            try parameters.set(keyword, try value())
        }
    }

    private func action(_ words: [String]) throws(ScenarioValueError) -> ScenarioAction {
        let rest = Array(words.dropFirst())
        switch words[0] {
        case "rollout":
            guard rest.count == 1, rest[0].hasSuffix("%") else {
                throw ScenarioValueError("'rollout' needs a percentage such as 10%")
            }
            do {
                let p = try MicroPercent.parse(String(rest[0].dropLast()))
                guard p.isValidPercentage else { throw ScenarioValueError("a rollout percentage is 0% to 100%") }
                return .rollout(p)
            } catch let e as ScenarioValueError {
                throw e
            } catch {
                throw ScenarioValueError("\(error)")
            }
        case "kill", "resume":
            guard rest.isEmpty else { throw ScenarioValueError("'\(words[0])' takes no value") }
            return words[0] == "kill" ? .kill : .resume
        case "release":
            guard let version = rest.first else { throw ScenarioValueError("'release' needs a version") }
            var release = AppRelease(version: version)
            var i = 1
            while i < rest.count {
                guard i + 1 < rest.count else { throw ScenarioValueError("'\(rest[i])' needs a value") }
                let v = rest[i + 1]
                switch rest[i] {
                case "adoption":
                    guard v.hasSuffix("/h") else {
                        throw ScenarioValueError("adoption is a share per hour such as 40%/h")
                    }
                    release.adoptionPerHour = try ScenarioValues.share(String(v.dropLast(2)))
                case "crash-rate": release.crashRate = try ScenarioValues.share(v)
                case "app-id":
                    guard v.split(separator: ".").count >= 2 else {
                        throw ScenarioValueError("an App ID is TEAMID.bundle.id, e.g. WRONGTEAM1.dev.rollout.fleet")
                    }
                    release.appID = v
                default:
                    throw ScenarioValueError(
                        "unknown release option '\(rest[i])': expected adoption, crash-rate or app-id")
                }
                i += 2
            }
            return .release(release)
        default:
            let name = words[0]
            guard let changeable = FleetParameters.isChangeable(name) else {
                throw ScenarioValueError("unknown action or parameter '\(name)'")
            }
            guard changeable else {
                throw ScenarioValueError("'\(name)' is fixed when the fleet is created; set it without 'at'")
            }
            guard !rest.isEmpty else { throw ScenarioValueError("'\(name)' needs a value") }
            let text = rest.joined(separator: " ")
            var check = parameters
            try check.set(name, text)
            return .parameter(name: name, value: text)
        }
    }
}

/// A scenario that could not be read, with where and why.
public struct ScenarioError: Error, Hashable, Sendable, CustomStringConvertible {
    public var scenario: String
    /// 0 when the problem is not on one line (a missing file).
    public var line: Int
    public var message: String

    public var description: String {
        line > 0 ? "scenario \(scenario), line \(line): \(message)" : "scenario \(scenario): \(message)"
    }
}

extension Scenario {
    /// A shipped scenario by name, or a scenario file by path (anything with a `/` or ending in `.scenario`).
    public static func load(_ nameOrPath: String) throws(ScenarioError) -> Scenario {
        let isPath = nameOrPath.contains("/") || nameOrPath.hasSuffix(".scenario")
        guard isPath else {
            guard let source = builtInSource(nameOrPath) else {
                throw ScenarioError(
                    scenario: nameOrPath, line: 0,
                    message: "no such scenario; built in: \(builtInNames.joined(separator: ", ")) (or give a file path)"
                )
            }
            return try parse(source, name: nameOrPath)
        }
        let bytes: [UInt8]
        do { bytes = try Files.read(nameOrPath, limit: (1 << 20) + 1) } catch {
            throw ScenarioError(scenario: nameOrPath, line: 0, message: "cannot read \(nameOrPath): \(error.reason)")
        }
        guard bytes.count <= 1 << 20 else {
            throw ScenarioError(scenario: nameOrPath, line: 0, message: "larger than 1 MiB; not a scenario file")
        }
        return try parse(String(decoding: bytes, as: UTF8.self), name: Path.deletingExtension(Path.lastComponent(of: nameOrPath)))
    }
}
