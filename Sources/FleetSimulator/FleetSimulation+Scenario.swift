import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

// The scenario: its scheduled actions, the operator's changes published through the write path.
extension FleetSimulation {
    func perform(_ item: ScheduledAction, at t: Int64) throws {
        switch item.action {
        case .parameter(let name, let value):
            do {
                try parameters.set(name, value)
                note("\(name) \(value)", at: t)
            } catch {
                note("scenario line \(item.line): \(error)", at: t)
            }
        case .rollout(let p): publish(.set(p), item, at: t)
        case .kill: publish(.kill, item, at: t)
        case .resume: publish(.resume, item, at: t)
        case .release(let r):
            let identity: AppIdentity
            if let appID = r.appID, let dot = appID.firstIndex(of: ".") {
                identity = AppIdentity(
                    teamId: String(appID[..<dot]), bundleId: String(appID[appID.index(after: dot)...]))
            } else {
                identity = baseIdentity
            }
            if let existing = appVersions.firstIndex(of: r.version) {
                appCrashRates[existing] = r.crashRate
                appIdentities[existing] = identity
                newestRelease = (existing, t, r.adoptionPerHour)
            } else if appVersions.count < Int(UInt8.max) {
                appVersions.append(r.version)
                appCrashRates.append(r.crashRate)
                appIdentities.append(identity)
                newestRelease = (appVersions.count - 1, t, r.adoptionPerHour)
            }
            note("app \(item.action) released", at: t)
        }
    }

    /// A scripted change through the write path, as the scenario's operator.
    func publish(_ operation: RolloutOperation, _ item: ScheduledAction, at t: Int64) {
        var request = WritePath.Request(
            intent: .rollout(operation), actor: options.actor,
            reason: "scenario \(scenario.name), line \(item.line)", origin: "ROLLOUT_SIMULATOR")
        request.retryOnConflict = true
        do {
            // A drill provokes what the guardrail exists to stop (a nudge into throttling): where the guardrail
            // refuses, the simulator overrides it with the scenario line as the reason, as an operator may, and the
            // write path audits the override. Step-up is never lifted (and may ask a code for the override).
            let preview = try writePath.preview(request)
            request.overrideGuardrail = preview.reports.contains {
                if case .refuse = $0.decision { $0.policy == TelemetryGuardrail.policyName } else { false }
            }
            switch try writePath.execute(request) {
            case .published(let stored, let proposal, _):
                stats.publishedChanges += 1
                note("published version \(stored.info.number): \(proposal.summary)", at: t)
            case .unchanged(_, let proposal):
                note("\(operation): nothing to change (\(proposal.summary))", at: t)
            }
        } catch {
            stats.refusedChanges += 1
            note("scenario line \(item.line), \(operation) not published: \(error)", at: t)
        }
        config.invalidate()
    }
}
