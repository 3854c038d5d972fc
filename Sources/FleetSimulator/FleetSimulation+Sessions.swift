import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

// The client flow of one device: launches, sessions, crashes and Remote Config fetches.
extension FleetSimulation {
    func launch(_ i: Int, at t: Int64) throws {
        let p = parameters
        let previous = devices[i].lastLaunch == .min ? options.start.microseconds : devices[i].lastLaunch
        devices[i].lastLaunch = t
        devices[i].session &+= 1
        let elapsedDays = Double(t - previous) / 86_400_000_000

        if p.osUpgradesPerDay > 0, devices[i].rng.chance(1 - exp(-p.osUpgradesPerDay * elapsedDays)),
            devices[i].osUpdates < 30
        {
            devices[i].osUpdates += 1
            stats.osUpgrades += 1
            if clients[Int32(i)]?.hasAttested == true, devices[i].rng.chance(p.upgradeInvalidatesKey) {
                devices[i].set(.keyInvalid)
            }
        }
        if let release = newestRelease, Int(devices[i].app) != release.index {
            let hours = Double(t - max(release.time, previous)) / 3_600_000_000
            if devices[i].rng.chance(1 - exp(-release.adoptionPerHour * hours)) {
                devices[i].app = UInt8(release.index)
                stats.appUpdates += 1
            }
        }
        // A launch fetches once the cached config is older than the fetch interval; a real-time listener also
        // learns at connect time that a newer version exists, and fetches it regardless of the interval.
        let stale = t - devices[i].lastFetch >= p.fetchInterval.microseconds
        let behind = devices[i].has(.realtime) ? Int32(try config.newest(at: t)) != devices[i].fetchedVersion : false
        if stale || behind {
            _ = try fetch(i, at: t)
        }

        devices[i].set(.inSession)
        if devices[i].has(.realtime) {
            devices[i].realtimeSlot = Int32(inSessionRealtime.count)
            inSessionRealtime.append(Int32(i))
        } else {
            devicesInSessionOther += 1
        }
        stats.sessions += 1
        try emit(.sessionStart, i, at: t)

        let length = max(20_000_000, Int64(devices[i].rng.exponential(mean: Double(p.sessionLength.microseconds))))
        let runsAppAttest = devices[i].has(.flagOn) && eligible(devices[i])
        let crashRate = p.crashRate + (runsAppAttest ? p.exposedCrashRate : 0) + appCrashRates[Int(devices[i].app)]
        if devices[i].rng.chance(crashRate) {
            devices[i].sessionEnd = t + max(1, Int64(devices[i].rng.unit() * Double(length)))
            schedule(i, .crashEnd, at: devices[i].sessionEnd)
        } else {
            devices[i].sessionEnd = t + length
            schedule(i, .sessionEnd, at: devices[i].sessionEnd)
        }
        if devices[i].rng.chance(p.nonfatalRate) {
            let span = Double(devices[i].sessionEnd - t)
            scheduleInSession(i, .nonfatalCrash, at: t + Int64(devices[i].rng.unit() * span))
        }
        if runsAppAttest {
            // The app's first backend call after launch asks App Check for a token.
            requestTokenLater(i, at: t + Int64(devices[i].rng.uniform(0.5, 3) * 1_000_000))
        }
        scheduleInSession(i, .intervalFetch, at: devices[i].lastFetch + max(p.fetchInterval.microseconds, 1_000_000))
    }

    func endSession(_ i: Int, at t: Int64, crashed: Bool) throws {
        if crashed {
            stats.fatalCrashes += 1
            try emit(.crash(fatal: true), i, at: t)
        }
        devices[i].clear(.inSession)
        devices[i].requestAt = 0
        if devices[i].has(.realtime) {
            let slot = Int(devices[i].realtimeSlot)
            let last = inSessionRealtime.removeLast()
            if slot < inSessionRealtime.count {
                inSessionRealtime[slot] = last
                devices[Int(last)].realtimeSlot = Int32(slot)
            }
            devices[i].realtimeSlot = -1
        } else {
            devicesInSessionOther -= 1
        }
        agenda.push(time: nextLaunch(i, after: t), payload: Self.pack(Int32(i), .launch, 0))
    }

    // MARK: Remote Config

    /// Fetches and activates the newest version; true when the flag turned on.
    func fetch(_ i: Int, at t: Int64) throws -> Bool {
        let version = try config.newest(at: t)
        stats.templateVersion = max(stats.templateVersion, version)
        let wasOn = devices[i].has(.flagOn)
        if Int32(version) != devices[i].fetchedVersion { activate(i, version: version) }
        devices[i].lastFetch = t
        stats.configFetches += 1
        try emit(.configFetch(templateVersion: Int64(version)), i, at: t)
        return !wasOn && devices[i].has(.flagOn)
    }

    /// Activates `version` (the newest the config view has read): the flag and cohort it gives this device.
    func activate(_ i: Int, version: Int) {
        let wasOn = devices[i].has(.flagOn)
        let values = config.values(for: installationID(i))
        devices[i].fetchedVersion = Int32(version)
        devices[i].cohort = values.cohort
        if values.flag { devices[i].set(.flagOn) } else { devices[i].clear(.flagOn) }
        if eligible(devices[i]), values.flag != wasOn { stats.exposedDevices += values.flag ? 1 : -1 }
    }

    /// A fetch while the app runs (real-time update or fetch interval): when the flag turns on, the app's next
    /// backend call asks for a token.
    func fetchInSession(_ i: Int, at t: Int64) throws {
        if try fetch(i, at: t), eligible(devices[i]) {
            let delay = max(1_000_000, Int64(devices[i].rng.exponential(mean: 30_000_000)))
            requestTokenLater(i, at: t + delay)
        }
    }

    /// Checks the store for a new version; real-time listeners in a session fetch it within seconds.
    func poll(_ t: Int64) throws {
        let version = try config.newest(at: t)
        if version != announcedVersion {
            announcedVersion = version
            stats.templateVersion = max(stats.templateVersion, version)
            for d in inSessionRealtime {
                let i = Int(d)
                let delay = Int64(devices[i].rng.uniform(1, 20) * 1_000_000)
                scheduleInSession(i, .realtimeFetch, at: t + delay)
            }
        }
        if t + Self.pollInterval <= end.microseconds {
            agenda.push(time: t + Self.pollInterval, payload: Self.pack(0, .poll, 0))
        }
    }
}
