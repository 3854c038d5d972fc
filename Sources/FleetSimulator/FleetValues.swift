import Rollout
import Telemetry
import Timekeeping

/// How one run is set up: fleet size, seed, simulated start and length, and who publishes its config changes.
public struct FleetOptions: Sendable {
    public var devices: Int
    /// Decides every random draw of the model: the same seed gives the same events in the same order.
    public var seed: UInt64
    /// Where simulated time starts.
    public var start: Instant
    public var duration: Instant.Duration
    public var names: RolloutNames
    /// The id the scenario's scripted changes (`rollout 10%`) are published and audited as: always the
    /// simulator itself, never an operator (so step-up, which knows no `simulator`, refuses what it protects).
    public let actor = FleetOptions.simulatorActor
    public static let simulatorActor = "simulator"
    /// A monotonic nanosecond source to measure the time spent in real cryptography (benchmarks only; the
    /// model never reads it).
    public var cryptoStopwatch: (@Sendable () -> UInt64)?

    public init(
        devices: Int, seed: UInt64, start: Instant, duration: Instant.Duration, names: RolloutNames = .standard,
        cryptoStopwatch: (@Sendable () -> UInt64)? = nil
    ) {
        self.devices = devices
        self.seed = seed
        self.start = start
        self.duration = duration
        self.names = names
        self.cryptoStopwatch = cryptoStopwatch
    }

    /// The scenario's own fleet size, duration and start, unless given here.
    public init(
        scenario: Scenario, devices: Int? = nil, seed: UInt64, start: Instant, duration: Instant.Duration? = nil,
        names: RolloutNames = .standard
    ) {
        self.init(
            devices: devices ?? scenario.devices, seed: seed, start: scenario.start ?? start,
            duration: duration ?? scenario.duration, names: names)
    }
}

/// Running totals of a simulation, as of `now`.
public struct FleetStatistics: Hashable, Sendable {
    public var now: Instant
    public var devices = 0
    /// Devices that can run App Attest: iOS 14 or later, hardware support, not a simulator.
    public var eligibleDevices = 0
    /// Eligible devices whose activated config has the flag on.
    public var exposedDevices = 0
    public var devicesInSession = 0
    /// The newest template version the fleet has seen.
    public var templateVersion = 0

    public var events = 0
    public var sessions = 0
    public var configFetches = 0
    public var fatalCrashes = 0
    public var nonfatalCrashes = 0
    /// Token requests that reached App Attest (flag on, supported, no valid token, not backing off).
    public var tokenRequests = 0
    /// Successful attestations and assertions (`AppAttestSuccess`).
    public var attestations = 0
    public var assertions = 0
    /// `AppAttestFailure` by error class (`serverUnavailable`, `rejected:rpIdMismatch`, ...).
    public var failures: [String: Int] = [:]
    /// Attestations Apple refused for capacity (a subset of `serverUnavailable`).
    public var throttled = 0
    /// App Attest keys generated (P-256): one per install, again after `invalidKey`.
    public var keysGenerated = 0
    public var osUpgrades = 0
    public var appUpdates = 0
    /// Config changes the scenario published.
    public var publishedChanges = 0
    /// Scripted changes the write path refused (policies, step-up) or could not publish.
    public var refusedChanges = 0
    /// Time spent in real cryptography (key generation, attestation and assertion exchanges), when measured.
    public var cryptoNanoseconds: UInt64 = 0
    /// SHA-256 of the events so far (see `EventDigest`).
    public var eventDigest = ""

    public var failureCount: Int { failures.values.reduce(0, +) }
}

/// Something notable the simulation did, in words (scripted changes, refusals, faults).
public struct SimulationNote: Hashable, Sendable, CustomStringConvertible {
    public var time: Instant
    public var text: String
    public var description: String { "\(time.iso8601)  \(text)" }
}

/// One device as the simulation sees it (for tests and inspection).
public struct DeviceSnapshot: Hashable, Sendable {
    public var index: Int
    public var installationID: String
    public var osVersion: String
    public var appVersion: String
    public var provider: AttestationProvider
    public var isSimulator: Bool
    public var supportsAppAttest: Bool
    public var realtime: Bool
    /// Whether App Attest can run here at all: iOS 14+, supported hardware, not a simulator.
    public var isEligible: Bool
    /// The template version activated: the last one fetched, or the one cached before the start.
    public var fetchedVersion: Int
    public var flag: Bool
    public var cohort: Cohort
    public var hasAttested: Bool
    public var sessions: Int
}
