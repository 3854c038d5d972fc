import AppCheck
import Foundation
import RampPlans
import RemoteConfig
import Rollout
import RolloutApp
import StepUp
import StoreConformance
import Telemetry
import Testing
import TestSupport
import Timekeeping

/// Every port of a `RolloutSession` passes the same checks on every backend, each session opened through the one
/// opener (`Wiring.session`) on a store made the way `rollout init` makes it (`Wiring.createStore`): templates,
/// step-up, ramp plans, settings, telemetry, the heartbeat, App Check state and the access mode. Where
/// Tests/StoreConformance has the checks of a port, they run here too, on the session's port.
///
/// A PostgreSQL backend seals with the team store key the invocation's environment names (`ROLLOUT_STORE_KEY`, the
/// fixture's own file, in process as in the binary), which `Wiring.createStore` creates when it is missing, as
/// `rollout init` does.
@Suite(.serialized)
struct SessionConformanceTests {
    static let t0 = Instant(seconds: 1_780_000_000)

    // MARK: Templates

    /// Publish with compare-and-swap through the write path, a stale ETag is a conflict naming the winner and
    /// writes nothing, versions list newest first, and `audit verify` passes with a record per publish.
    @Test(arguments: Backend.allCases)
    func templates(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let session = try store.open()
        let base = try session.templates.current()
        let recordsBefore = try session.templates.auditRecords(limit: 1000, before: nil).count
        let outcome = try session.writePath().execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 5))), actor: store.operatorID,
                reason: "conformance", origin: Wiring.origin))
        guard case .published(let published, _, _) = outcome else {
            Issue.record("set 5% did not publish: \(outcome)")
            return
        }
        #expect(published.info.number == base.info.number + 1)
        #expect(published.etag != base.etag)
        #expect(
            try RolloutPlan.locate(in: session.templates.current().template)?.percentage == MicroPercent(percent: 5))

        // A publish on the ETag read before the winner is a conflict carrying the winner; nothing is written.
        let stale = try RolloutPlan.apply(
            .set(MicroPercent(percent: 20)), to: base.template.strippingVersionInfo(), newSeed: "x"
        ).template
        do {
            _ = try session.templates.publish(
                PublishRequest(
                    template: stale, ifMatch: .etag(base.etag), updateUser: store.operatorID,
                    updateOrigin: Wiring.origin, updateType: .incremental, description: "stale", time: Self.t0,
                    audit: AuditEntry(time: Self.t0, actor: store.operatorID, action: "set", result: .published)))
            Issue.record("\(backend): a publish on a stale etag went through")
        } catch let conflict as PublishConflict {
            #expect(conflict.current.info == published.info)
            #expect(conflict.expectedETag == base.etag)
        }
        #expect(try session.templates.current().info == published.info)

        let versions = try session.templates.versions(limit: 10, before: nil).map(\.number)
        #expect(versions.first == published.info.number && versions == versions.sorted(by: >), "\(versions)")
        #expect(try session.templates.version(published.info.number).etag == published.etag)

        // The publish's audit record chains, and the whole store verifies through another session.
        let records = try session.templates.auditRecords(limit: 1000, before: nil)
        #expect(records.count == recordsBefore + 1, "\(records.count - recordsBefore) records for one publish")
        #expect(records.first?.entry.version == published.info.number)
        #expect(AuditChain.verify(records.reversed()) == nil)
        let verification = try store.open().verifyAudit()
        #expect(verification.auditRecords == records.count)
    }

    // MARK: Step-up

    /// The step-up policy is written through the settings write path and read back by the step-up port; an
    /// operator is enrolled (started, then confirmed with a code) and listed, and step-up is then in force.
    @Test(arguments: Backend.allCases)
    func stepUp(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let session = try store.open()
        let settings = session.settingsWritePath()
        #expect(try session.stepUp.enforcement().policy == .standard)
        let changed = try settings.execute(
            .setting(key: "lockout-attempts", value: "5"), actor: store.operatorID, code: nil)
        #expect(changed == .changed(from: "\(StepUpPolicy.standard.lockoutAttempts)", to: "5"))
        let reopened = try store.open()
        #expect(try reopened.stepUp.enforcement().policy.lockoutAttempts == 5)
        #expect(try reopened.settingsWritePath().read { try $0.stepUpPolicy() }.lockoutAttempts == 5)

        let ana = try OperatorID(store.operatorID)
        guard
            case .enrolmentStarted(let pending) = try settings.execute(
                .startEnrolment(ana, approver: nil), actor: store.operatorID, code: nil)
        else {
            Issue.record("\(backend): the enrolment did not start")
            return
        }
        let code = TOTP.standard.code(secret: pending.secret, at: SystemClock().now())
        let confirmed = try settings.execute(.confirmEnrolment(ana), actor: store.operatorID, code: code)
        #expect(confirmed == .enrolled(approvedBy: nil), "\(confirmed)")
        let after = try store.open()
        #expect(try after.settingsWritePath().read { try $0.operators() }.map(\.id) == [ana])
        #expect(try after.stepUp.operatorRecord(ana)?.secret == pending.secret)
        #expect(try after.stepUp.enforcement().enforced)
    }

    // MARK: Ramp plans

    /// The checks of the ramp plan port (Tests/StoreConformance) on sessions: each handle another session on the
    /// same store, the read-only one a `--read-only` session.
    @Test(
        arguments: Backend.allCases,
        [
            "a plan round-trips and each replace raises the revision and revokes the pre-approval",
            "the state's compare-and-swap writes on the revision read and refuses a stale one",
            "a read-only store refuses every write and nothing changes",
        ])
    func rampPlans(_ backend: Backend, _ check: String) throws {
        var stores: [StoreUnderTest] = []
        let factory: RampPlanStoreConformance.Factory = {
            let store = try StoreUnderTest(backend)
            stores.append(store)
            return RampPlanStoreConformance.Fixture(
                open: {
                    let s = try store.open()
                    return (s.plans, s.templates)
                },
                openReadOnly: { try store.open(readOnly: true).plans })
        }
        try RampPlanStoreConformance.checks.first { $0.name == check }!.run(factory)
    }

    // MARK: Settings

    /// A guardrail setting round-trips through the settings write path, with its audit record, and the monitor
    /// of another session reads it.
    @Test(arguments: Backend.allCases)
    func settings(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let session = try store.open()
        let before = try session.templates.auditRecords(limit: 1000, before: nil).count
        let outcome = try session.settingsWritePath().execute(
            .setting(key: "guardrails.auto-kill", value: "on"), actor: store.operatorID, code: nil)
        #expect(outcome == .changed(from: "off", to: "on"), "\(outcome)")
        let again = try session.settingsWritePath().execute(
            .setting(key: "guardrails.auto-kill", value: "on"), actor: store.operatorID, code: nil)
        #expect(again == .unchanged("on"))
        let reopened = try store.open()
        #expect(try reopened.monitored.guardrailSettingsStore().guardrailSettings().autoKill)
        #expect(try reopened.settingsWritePath().read { try $0.guardrailSettings() }.autoKill)
        let records = try reopened.templates.auditRecords(limit: 1000, before: nil)
        #expect(records.count == before + 1)
        #expect(records.first?.entry.action == "policy set guardrails.auto-kill" && records.first?.entry.to == "on")
        _ = try reopened.verifyAudit()
        // An invalid value is refused and nothing is written.
        #expect(throws: SettingsWritePath.Failure.self) {
            try reopened.settingsWritePath().execute(
                .setting(key: "guardrails.auto-kill", value: "maybe"), actor: store.operatorID, code: nil)
        }
        #expect(try reopened.templates.auditRecords(limit: 1000, before: nil).count == before + 1)
    }

    // MARK: Telemetry

    /// The checks of the telemetry port (Tests/StoreConformance) on sessions' counters.
    @Test(
        arguments: Backend.allCases,
        [
            "a commit returns what it added, and the batch log lists it with increasing ids",
            "the counters are the fold of the events (cohorts, user-level transitions, installations, reasons)",
            "a read-only handle refuses a batch and nothing is written",
        ])
    func telemetry(_ backend: Backend, _ check: String) throws {
        var stores: [StoreUnderTest] = []
        let factory: TelemetryCountersConformance.Factory = {
            let store = try StoreUnderTest(backend)
            stores.append(store)
            return TelemetryCountersConformance.Fixture(
                open: { try store.open().telemetryCounters() },
                openReadOnly: { try store.open(readOnly: true).telemetryCounters() })
        }
        try TelemetryCountersConformance.checks.first { $0.name == check }!.run(factory)
    }

    /// A small batch committed through the session reaches the monitor of another session (status, the console).
    @Test(arguments: Backend.allCases)
    func telemetryReachesTheMonitor(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        // After the store's creation (the rollout's start): the monitor counts from the start's minute on, so
        // events some seconds earlier fell out whenever the creation was early in a minute (a CI run caught it).
        let now = SystemClock().now()
        let batch = TelemetryBatch()
        for i in 0..<6 {
            batch.record(
                TelemetryEvent(
                    time: now, installationID: "i\(i)", kind: .sessionStart,
                    cohort: i % 2 == 0 ? .enabled : .control, provider: .appAttest, osVersion: "17.4",
                    appVersion: "3.2.1"))
        }
        let receipt = try store.open().telemetryCounters().commit(batch, source: "conformance", at: now)
        #expect(receipt?.events == 6)
        let reader = try store.open()
        let totals = try reader.telemetryCounters().allTimeTotals()
        #expect(totals.sum(.session, cohort: .enabled) == 3 && totals.sum(.session, cohort: .control) == 3)
        #expect(try reader.telemetryCounters().installationCount() == 6)
        #expect(try reader.monitor().status().snapshot.hasTelemetry)
    }

    // MARK: Heartbeat

    /// The simulation heartbeat round-trips and clears.
    @Test(arguments: Backend.allCases)
    func heartbeat(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let session = try store.open()
        #expect(try session.heartbeat.simulationClock() == nil)
        let record = SimulationClockRecord(
            wallStart: Self.t0, simulatedStart: Self.t0 - .hours(2), speed: 60,
            wallUpdated: Self.t0 + .seconds(Int64(5)),
            simulatedAtUpdate: Self.t0 - .hours(2) + .minutes(5), running: true)
        try session.heartbeat.publishSimulationClock(record)
        #expect(try store.open().heartbeat.simulationClock() == record)
        try session.heartbeat.clearSimulationClock()
        #expect(try store.open().heartbeat.simulationClock() == nil)
    }

    // MARK: App Check state

    static let app = AppAttestApp(
        appId: "1:123456789012:ios:0123456789abcdef",
        identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.example.app"), environment: .production)
    static let project = AppCheckProject(number: "123456789012", id: "demo-rollout")

    /// An app registered through the settings write path is read back by another session's App Check state.
    @Test(arguments: Backend.allCases)
    func appCheckState(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let session = try store.open()
        let outcome = try session.settingsWritePath().execute(
            .appCheck(.registerApp(Self.app, project: Self.project)), actor: store.operatorID, code: nil)
        guard case .appCheckChanged = outcome else {
            Issue.record("\(backend): registering an app: \(outcome)")
            return
        }
        let configuration = try store.open().appCheckState().state.configuration()
        #expect(configuration?.project == Self.project)
        #expect(configuration?.apps.map(\.appId) == [Self.app.appId])
        let record = try store.open().templates.auditRecords(limit: 1, before: nil).first
        #expect(record?.entry.action.hasPrefix("appcheck ") == true, "\(String(describing: record))")
    }

    /// Removing an App Check app left its debug tokens stored (`debug-token list` still showed them), and an app
    /// registered again under the same id (another team or bundle) exchanged the old token again. They now go with
    /// the app, in its one audited write, on every backend (both stores share `SettingsWritePath.prepare`).
    @Test(arguments: Backend.allCases)
    func removingAnAppRemovesItsDebugTokens(_ backend: Backend) throws {
        let store = try StoreUnderTest(backend)
        let path = try store.open().settingsWritePath()
        func run(_ change: SettingsWritePath.AppCheckChange) throws -> SettingsWritePath.Outcome {
            try path.execute(.appCheck(change), actor: store.operatorID, code: nil)
        }
        var other = Self.app
        other.appId = "1:123456789012:ios:fedcba9876543210"
        let digest = [UInt8](repeating: 7, count: 32)
        _ = try run(.registerApp(Self.app, project: Self.project))
        _ = try run(.registerApp(other, project: Self.project))
        for (i, (appId, name)) in [(Self.app.appId, "ci"), (Self.app.appId, "ci2"), (other.appId, "ci")].enumerated() {
            let token = i == 0 ? digest : [UInt8](repeating: UInt8(i), count: 32)
            _ = try run(.addDebugToken(DebugTokenRecord(appId: appId, digest: token, name: name, createdAt: Self.t0)))
        }
        // A token registered already (for any app) is refused, not audited as added while it stays the other's.
        let recordsBefore = try store.open().templates.auditRecords(limit: 1, before: nil).first?.sequence
        #expect {
            _ = try run(.addDebugToken(DebugTokenRecord(appId: other.appId, digest: digest, name: "copy", createdAt: Self.t0)))
        } throws: { "\($0)".contains("registered already, as 'ci' for \(Self.app.appId)") }
        #expect(try store.open().templates.auditRecords(limit: 1, before: nil).first?.sequence == recordsBefore)
        let outcome = try run(.removeApp(appId: Self.app.appId))
        #expect(outcome == .appCheckChanged("removed \(Self.app.appId) and its 2 debug token(s) ('ci', 'ci2')"), "\(outcome)")
        #expect(try store.open().appCheckState().state.debugTokens().map(\.appId) == [other.appId])
        let record = try store.open().templates.auditRecords(limit: 1, before: nil).first?.entry
        #expect(record?.action == "appcheck app remove \(Self.app.appId)" && record?.to.contains("2 debug token(s)") == true)

        var again = Self.app
        again.identity = AppIdentity(teamId: "ZZZZZZZZZZ", bundleId: "com.example.other")
        _ = try run(.registerApp(again, project: Self.project))
        #expect(try !store.open().appCheckState().state.hasDebugToken(appId: Self.app.appId, digest: digest))
        _ = try store.open().verifyAudit()
    }

    // MARK: Access mode

    /// A read-only session refuses each write with the typed refusal (the CLI's exit 4), and nothing changes; on
    /// PostgreSQL the viewer role's session is refused by the server, with the same outcome.
    @Test(arguments: Backend.allCases, ["read-only", "viewer"])
    func accessRefusals(_ backend: Backend, _ access: String) throws {
        guard access == "read-only" || backend.isPostgres else { return }
        let store = try StoreUnderTest(backend)
        try store.applyDocumentedGrants()
        let owner = try store.open()
        let before = try owner.verifyAudit()
        let reader = access == "read-only" ? try store.open(readOnly: true) : try store.open(role: "rollout_viewer")
        #expect(reader.readOnly == (access == "read-only"))
        let expected: SessionRefusal.Kind = access == "read-only" ? .readOnly : .permissionDenied
        let now = SystemClock().now()
        let batch = TelemetryBatch()
        batch.record(
            TelemetryEvent(
                time: now, installationID: "i", kind: .sessionStart, cohort: .enabled, provider: .appAttest,
                osVersion: "17.4", appVersion: "3.2.1"))
        let writes: [(String, () throws -> Void)] = [
            (
                "set",
                {
                    _ = try reader.writePath().execute(
                        WritePath.Request(
                            intent: .rollout(.set(MicroPercent(percent: 5))), actor: "v@test",
                            reason: "no", origin: Wiring.origin))
                }
            ),
            (
                "policy set",
                {
                    _ = try reader.settingsWritePath().execute(
                        .setting(key: "guardrails.auto-kill", value: "on"), actor: "v@test", code: nil)
                }
            ),
            (
                "operator enroll",
                {
                    _ = try reader.settingsWritePath().execute(
                        .startEnrolment(try OperatorID("v@test"), approver: nil), actor: "v@test", code: nil)
                }
            ),
            (
                "appcheck app add",
                {
                    _ = try reader.settingsWritePath().execute(
                        .appCheck(.registerApp(Self.app, project: Self.project)), actor: "v@test", code: nil)
                }
            ),
            ("telemetry commit", { _ = try reader.telemetryCounters().commit(batch, source: "v", at: now) }),
            (
                "plan start",
                {
                    try reader.plans.replacePlan(
                        with: RampPlanRecord(
                            name: "ramp", source: "plan ramp\nstep 5% hold 1h\n", startedBy: "v@test", startedAt: now,
                            phase: "running", reached: 0, reachedAt: nil, okSince: nil, reason: "", revision: 0))
                }
            ),
            (
                "heartbeat",
                {
                    try reader.heartbeat.publishSimulationClock(
                        SimulationClockRecord(
                            wallStart: now, simulatedStart: now, speed: 60, wallUpdated: now, simulatedAtUpdate: now,
                            running: true))
                }
            ),
        ]
        for (name, write) in writes {
            do {
                try write()
                Issue.record("\(backend) \(access): \(name) was written")
            } catch {
                #expect(
                    accessRefusal(error) == expected, "\(backend) \(access): \(name) threw \(type(of: error)): \(error)"
                )
            }
        }
        let after = try store.open().verifyAudit()
        #expect(after.auditRecords == before.auditRecords && after.headHash == before.headHash, "a refused write wrote")
    }
}
