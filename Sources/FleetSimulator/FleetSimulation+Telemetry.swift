import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

// Telemetry emission: every event a device logs goes to the sink and the run's statistics.
extension FleetSimulation {
    func emit(_ kind: TelemetryEventKind, _ i: Int, at t: Int64) throws {
        let d = devices[i]
        let event = TelemetryEvent(
            time: Instant(microseconds: t), installationID: installationID(i), kind: kind, cohort: d.cohort,
            provider: provider(d), osVersion: osVersion(d), appVersion: appVersions[Int(d.app)])
        digest.add(event)
        try sink.record(event)
    }
}
