import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

// The fleet's devices: who they are, what they run, and when they next launch.
extension FleetSimulation {
    func createDevices() {
        let p = parameters
        let osWeights = p.osVersions.map(\.weight)
        let appWeights = p.appVersions.map(\.weight)
        let offsetWeights = p.utcOffsets.map(\.weight)
        let t0 = options.start.microseconds
        devices.reserveCapacity(options.devices)
        agenda.reserve(options.devices + scenario.schedule.count + 64)
        for i in 0..<options.devices {
            var rng = SimulationRandom(seed: options.seed, stream: 1, index: UInt64(i))
            var d = Device(rng: rng)
            d.os = UInt8(rng.pick(weights: osWeights))
            d.app = UInt8(rng.pick(weights: appWeights))
            d.utcOffset = Int8(p.utcOffsets[rng.pick(weights: offsetWeights)].value)
            if rng.chance(p.simulators) { d.set(.simulator) }
            if rng.chance(p.attestUnsupported) { d.set(.unsupported) }
            if rng.chance(p.realtime) { d.set(.realtime) }
            d.sessionRate = Float(0.25 + 1.5 * rng.unit())
            // The installed base has the config of the start cached from some launch before it: at most the fetch
            // interval plus a typical gap between launches ago.
            let gap = 86_400_000_000 / (p.sessionsPerDay * Double(d.sessionRate))
            d.lastFetch = t0 - Int64(rng.unit() * (Double(p.fetchInterval.microseconds) + gap))
            d.rng = rng
            devices.append(d)
            if eligible(d) { stats.eligibleDevices += 1 }
            if announcedVersion > 0 { activate(i, version: announcedVersion) }
            let first = nextLaunch(i, after: t0)
            agenda.push(time: first, payload: Self.pack(Int32(i), .launch, 0))
        }
    }

    func installationID(_ i: Int) -> String { InstallationID.make(seed: options.seed, index: i) }

    func osVersion(_ d: Device) -> String {
        "\(osMajor[Int(d.os)]).\(Int(osMinor[Int(d.os)]) + Int(d.osUpdates))"
    }

    func provider(_ d: Device) -> AttestationProvider {
        if d.has(.simulator) { return .debug }
        return osMajor[Int(d.os)] < 14 ? .deviceCheck : .appAttest
    }

    func eligible(_ d: Device) -> Bool { provider(d) == .appAttest && !d.has(.unsupported) }

    /// The next launch after `t` on the device's daily curve (thinning a Poisson process).
    func nextLaunch(_ i: Int, after t: Int64) -> Int64 {
        let peak = DailyCurve.maximum
        let perDay = parameters.sessionsPerDay * Double(devices[i].sessionRate) * peak
        let meanGap = 86_400_000_000 / perDay
        var x = t
        let offset = Int64(devices[i].utcOffset) * 3_600_000_000
        for _ in 0..<10_000 {
            x += Int64(devices[i].rng.exponential(mean: meanGap)) + 1
            if devices[i].rng.unit() * peak < DailyCurve.level(atMicros: x + offset) { break }
        }
        return x
    }
}

/// One device's state: 80 bytes, so that a million devices fit comfortably in memory.
struct Device {
    struct Traits: OptionSet {
        let rawValue: UInt8
        static let simulator = Traits(rawValue: 1)
        static let unsupported = Traits(rawValue: 2)
        static let realtime = Traits(rawValue: 4)
        static let inSession = Traits(rawValue: 8)
        static let flagOn = Traits(rawValue: 16)
        static let keyInvalid = Traits(rawValue: 32)
    }

    var rng: SimulationRandom
    var lastFetch: Int64 = .min
    var lastLaunch: Int64 = .min
    var sessionEnd: Int64 = 0
    var tokenExpiry: Int64 = 0
    var backoffUntil: Int64 = .min
    /// When the pending token request runs (0: none pending).
    var requestAt: Int64 = 0
    var session: UInt32 = 0
    var fetchedVersion: Int32 = 0
    var realtimeSlot: Int32 = -1
    var sessionRate: Float = 1
    var traits = Traits()
    var os: UInt8 = 0
    var osUpdates: UInt8 = 0
    var app: UInt8 = 0
    var utcOffset: Int8 = 0
    var backoffLevel: UInt8 = 0
    var cohort = Cohort.none

    init(rng: SimulationRandom) { self.rng = rng }

    @inline(__always) func has(_ t: Traits) -> Bool { traits.contains(t) }
    @inline(__always) mutating func set(_ t: Traits) { traits.insert(t) }
    @inline(__always) mutating func clear(_ t: Traits) { traits.remove(t) }
}

/// How app launches spread over a local day: quiet at night, busiest in the evening, averaging 1.
enum DailyCurve {
    static let amplitude = 0.7
    static let peakHour = 19.0
    static let maximum = 1 + amplitude

    /// The launch-rate multiplier at local time `micros` (an offset from the epoch already in local time).
    static func level(atMicros micros: Int64) -> Double {
        let day: Int64 = 86_400_000_000
        let hour = Double(((micros % day) + day) % day) / 3_600_000_000
        return 1 + amplitude * cos(2 * Double.pi * (hour - peakHour) / 24)
    }
}
