import Telemetry
import Timekeeping

/// A value with a weight, from a list such as `18.5:45% 17.7:30%`.
public struct Weighted<Value: Hashable & Sendable>: Hashable, Sendable {
    public var value: Value
    public var weight: Double
    public init(_ value: Value, _ weight: Double) {
        self.value = value
        self.weight = weight
    }
}

/// Everything that drives the fleet: its make-up, its habits, Apple's service and the crash rates.
///
/// Scenario files set these by name (`sessions-per-day 6`, `apple-capacity 100/s`); those marked as changeable
/// can also be changed at a simulated time (`at 1h apple-capacity 5/s`). The make-up of the fleet (OS and app
/// versions, time zones, simulators, real-time listeners) is fixed when the devices are created.
public struct FleetParameters: Hashable, Sendable {
    /// iOS versions as `major.minor` with weights; versions below 14 fall back to DeviceCheck.
    public var osVersions: [Weighted<String>] = [
        Weighted("18.5", 0.44), Weighted("17.7", 0.30), Weighted("16.7", 0.14), Weighted("15.8", 0.07),
        Weighted("13.7", 0.04), Weighted("12.5", 0.01),
    ]
    /// App versions with weights; releases scheduled with `release` are adopted over time.
    public var appVersions: [Weighted<String>] = [
        Weighted("3.1.0", 0.7), Weighted("3.0.2", 0.25), Weighted("2.9.1", 0.05),
    ]
    /// Devices' offsets from UTC in hours, with weights (sessions follow each device's local daily curve).
    public var utcOffsets: [Weighted<Int>] = [
        Weighted(-8, 0.2), Weighted(-5, 0.25), Weighted(0, 0.15), Weighted(1, 0.25), Weighted(9, 0.15),
    ]
    /// Share of simulator builds (the debug provider: never App Attest).
    public var simulators = 0.005
    /// Share of devices on iOS 14 or later whose hardware cannot run App Attest ("unavailable").
    public var attestUnsupported = 0.005
    /// Share of devices listening for real-time Remote Config updates while the app runs.
    public var realtime = 0.3

    /// Mean launches per device per day (each device draws its own rate around this).
    public var sessionsPerDay = 4.0
    /// Mean session length (exponential, at least 20 seconds).
    public var sessionLength: Instant.Duration = .minutes(6)
    /// Remote Config's minimum fetch interval: a launch fetches only when the last fetch is older.
    public var fetchInterval: Instant.Duration = .hours(1)
    /// Share of devices installing an OS update per day.
    public var osUpgradesPerDay = 0.01
    /// Share of OS updates after which the App Attest key is invalid (`invalidKey` on the next assertion).
    public var upgradeInvalidatesKey = 0.1

    /// Apple's attestation service: attestations per second it serves before answering `serverUnavailable`.
    public var appleCapacity = 100.0
    /// Background failure rates of attestations (`attestKey`), per `DCError` class in code order: 5% in all, the
    /// low end of what production apps report (FACTS §4).
    public var attestationFailures: [Double] = [0.025, 0.005, 0.005, 0.005, 0.01]
    /// Background failure rates of assertions (`generateAssertion`), per `DCError` class in code order.
    public var assertionFailures: [Double] = [0.004, 0, 0.001, 0.002, 0]
    /// The App Check SDK's back-off after `serverUnavailable`: doubling from this, up to `backoffMaximum`.
    public var backoffInitial: Instant.Duration = .seconds(Int64(30))
    public var backoffMaximum: Instant.Duration = .minutes(30)

    /// Fatal crashes per session for everybody.
    public var crashRate = 0.002
    /// Non-fatal crashes per session (reported, not counted against crash-free figures).
    public var nonfatalRate = 0.01
    /// Extra fatal crashes per session for devices that run App Attest (the regression a rollout must catch).
    public var exposedCrashRate = 0.0

    /// App Check token lifetime (30 minutes to 7 days); fixed when the exchange is set up.
    public var tokenTTL: Instant.Duration = .hours(1)

    public init() {}

    /// One settable parameter: its name in scenario files, what it means, and whether it can change mid-run.
    public struct Definition: Sendable {
        public var name: String
        public var help: String
        public var changeable: Bool
    }

    /// Every parameter a scenario can set, in the order `rollout simulate --help` lists them.
    public static let definitions: [Definition] = [
        Definition(name: "os-versions", help: "iOS versions with weights, e.g. 18.5:60% 13.7:5%", changeable: false),
        Definition(
            name: "app-versions", help: "app versions with weights, e.g. 3.1.0:80% 3.0.2:20%", changeable: false),
        Definition(
            name: "utc-offsets", help: "device time zones in hours with weights, e.g. -5:50% 1:50%", changeable: false),
        Definition(name: "simulators", help: "share of simulator builds (debug provider)", changeable: false),
        Definition(name: "attest-unsupported", help: "share of iOS 14+ devices without App Attest", changeable: false),
        Definition(name: "realtime", help: "share of devices with real-time config updates", changeable: false),
        Definition(name: "sessions-per-day", help: "mean launches per device per day", changeable: true),
        Definition(name: "session-length", help: "mean session length, e.g. 6m", changeable: true),
        Definition(name: "fetch-interval", help: "minimum interval between config fetches, e.g. 1h", changeable: true),
        Definition(name: "os-upgrades-per-day", help: "share of devices updating iOS per day", changeable: true),
        Definition(name: "upgrade-invalid-key", help: "share of iOS updates that invalidate the key", changeable: true),
        Definition(name: "apple-capacity", help: "attestations per second Apple serves, e.g. 100/s", changeable: true),
        Definition(
            name: "attest-failure.CLASS", help: "background attestKey failure rate of a DCError class", changeable: true
        ),
        Definition(
            name: "assert-failure.CLASS", help: "background generateAssertion failure rate of a class", changeable: true
        ),
        Definition(name: "backoff-initial", help: "first back-off after serverUnavailable, e.g. 30s", changeable: true),
        Definition(name: "backoff-max", help: "longest back-off, e.g. 30m", changeable: true),
        Definition(name: "crash-rate", help: "fatal crashes per session", changeable: true),
        Definition(name: "nonfatal-rate", help: "non-fatal crashes per session", changeable: true),
        Definition(
            name: "exposed-crash-rate", help: "extra fatal crashes per session when App Attest runs", changeable: true),
        Definition(name: "token-ttl", help: "App Check token lifetime, e.g. 1h", changeable: false),
    ]

    /// Whether `name` may be changed at a simulated time.
    public static func isChangeable(_ name: String) -> Bool? {
        let key =
            name.hasPrefix("attest-failure.") || name.hasPrefix("assert-failure.")
            ? String(name.prefix { $0 != "." }) + ".CLASS" : name
        return definitions.first { $0.name == key }?.changeable
    }

    /// Sets parameter `name` from its text in a scenario file.
    public mutating func set(_ name: String, _ text: String) throws(ScenarioValueError) {
        switch name {
        case "os-versions":
            osVersions = try ScenarioValues.weightedList(text) { v in
                let parts = v.split(separator: ".")
                guard parts.count == 2, let major = Int(parts[0]), let minor = Int(parts[1]), major > 0, major < 100,
                    minor >= 0, minor < 50
                else { return nil }
                return v
            }
        case "app-versions": appVersions = try ScenarioValues.weightedList(text) { $0.isEmpty ? nil : $0 }
        case "utc-offsets":
            utcOffsets = try ScenarioValues.weightedList(text) { Int($0).flatMap { abs($0) <= 14 ? $0 : nil } }
        case "simulators": simulators = try ScenarioValues.share(text)
        case "attest-unsupported": attestUnsupported = try ScenarioValues.share(text)
        case "realtime": realtime = try ScenarioValues.share(text)
        case "sessions-per-day":
            sessionsPerDay = try ScenarioValues.number(text)
            guard sessionsPerDay > 0, sessionsPerDay <= 1000 else {
                throw ScenarioValueError("sessions per day must be above 0 and at most 1000")
            }
        case "session-length": sessionLength = try ScenarioValues.positiveDuration(text)
        case "fetch-interval": fetchInterval = try ScenarioValues.duration(text)
        case "os-upgrades-per-day": osUpgradesPerDay = try ScenarioValues.share(text)
        case "upgrade-invalid-key": upgradeInvalidatesKey = try ScenarioValues.share(text)
        case "apple-capacity":
            appleCapacity = try ScenarioValues.rate(text)
            guard appleCapacity > 0 else { throw ScenarioValueError("the capacity must be above 0") }
        case "backoff-initial": backoffInitial = try ScenarioValues.positiveDuration(text)
        case "backoff-max": backoffMaximum = try ScenarioValues.positiveDuration(text)
        case "crash-rate": crashRate = try ScenarioValues.share(text)
        case "nonfatal-rate": nonfatalRate = try ScenarioValues.share(text)
        case "exposed-crash-rate": exposedCrashRate = try ScenarioValues.share(text)
        case "token-ttl":
            tokenTTL = try ScenarioValues.positiveDuration(text)
            guard tokenTTL >= .minutes(30), tokenTTL <= .days(7) else {
                throw ScenarioValueError("App Check tokens live 30 minutes to 7 days")
            }
        default:
            for prefix in ["attest-failure.", "assert-failure."] where name.hasPrefix(prefix) {
                let className = name.dropFirst(prefix.count)
                guard let c = AttestationErrorClass(name: className), let code = c.dcErrorCode else {
                    throw ScenarioValueError(
                        "unknown error class '\(className)': expected one of "
                            + AttestationErrorClass.appleClasses.map(\.description).joined(separator: ", "))
                }
                let rate = try ScenarioValues.share(text)
                if prefix == "attest-failure." {
                    attestationFailures[code] = rate
                } else {
                    assertionFailures[code] = rate
                }
                return
            }
            throw ScenarioValueError("unknown parameter '\(name)'")
        }
    }
}

/// Why a value in a scenario file could not be read.
public struct ScenarioValueError: Error, Hashable, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The value syntax of scenario files: shares `2%`, durations `1h30m`, rates `100/s`, weighted lists.
public enum ScenarioValues {
    /// `2%`, `0.5%` → 0.02, 0.005 (0% to 100%).
    public static func share(_ text: String) throws(ScenarioValueError) -> Double {
        guard text.hasSuffix("%"), let v = Double(text.dropLast()), v.isFinite, v >= 0, v <= 100 else {
            throw ScenarioValueError("'\(text)' is not a share such as 2% or 0.5% (0% to 100%)")
        }
        return v / 100
    }

    public static func number(_ text: String) throws(ScenarioValueError) -> Double {
        guard let v = Double(text), v.isFinite else { throw ScenarioValueError("'\(text)' is not a number") }
        return v
    }

    /// `90s`, `5m`, `2h`, `1d`, `1h30m`, `0s`.
    public static func duration(_ text: String) throws(ScenarioValueError) -> Instant.Duration {
        do { return try Instant.Duration.parse(text) } catch { throw ScenarioValueError(error.description) }
    }

    public static func positiveDuration(_ text: String) throws(ScenarioValueError) -> Instant.Duration {
        let d = try duration(text)
        guard d.microseconds > 0 else { throw ScenarioValueError("'\(text)' must be longer than 0s") }
        return d
    }

    /// `100/s`, `6/min`, `50/h` → events per second.
    public static func rate(_ text: String) throws(ScenarioValueError) -> Double {
        let parts = text.split(separator: "/")
        let per: Double? =
            switch parts.count == 2 ? String(parts[1]) : "" {
            case "s": 1
            case "min": 60
            case "h": 3600
            default: nil
            }
        guard let per, let n = Double(parts[0]), n.isFinite, n >= 0 else {
            throw ScenarioValueError("'\(text)' is not a rate such as 100/s, 30/min or 500/h")
        }
        return n / per
    }

    /// `a:60% b:40%`: values with weights (shares that need not add up to 100%, but not all zero).
    public static func weightedList<V>(_ text: String, _ value: (String) -> V?) throws(ScenarioValueError)
        -> [Weighted<V>]
    {
        var out: [Weighted<V>] = []
        for item in text.split(separator: " ") {
            guard let colon = item.lastIndex(of: ":"), let v = value(String(item[..<colon])) else {
                throw ScenarioValueError("'\(item)' is not VALUE:SHARE such as 18.5:40%")
            }
            out.append(Weighted(v, try share(String(item[item.index(after: colon)...]))))
        }
        guard !out.isEmpty, out.contains(where: { $0.weight > 0 }) else {
            throw ScenarioValueError("a list needs at least one VALUE:SHARE with a share above 0%")
        }
        return out
    }
}
