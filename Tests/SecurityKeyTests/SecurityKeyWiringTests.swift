import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import SecurityKey
import SoftwareAuthenticator
import StepUp
import Testing
import TestSupport
import Timekeeping

/// The application layer's wiring of security keys (what `operator enroll --method security-key` and
/// `--security-key` run) on a store file opened through `Wiring`, with the software authenticator as the key.
@Suite("Security keys through the application layer")
struct SecurityKeyWiringTests {
    @Test("enrol a key with the operator's code, then a change to 100% approved by the key publishes")
    func enrolAndApprove() throws {
        let directory = try TestSupport.temporaryDirectory("securitykey-wiring")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = ManualClock(Instant(seconds: 1_780_000_005))
        let path = directory.appendingPathComponent("app.rollout").path
        let session = try Wiring.createStore(path: path, seed: "rollout-test", operatorID: "ana@laptop", clock: clock)
            .rolloutSession()
        let ana = try OperatorID("ana@laptop")
        let key = SoftwareAuthenticator()
        let device = SecurityKeyDevice(name: key.path) { key.open($0) }
        func code() -> String { TOTP.standard.code(secret: pendingSecret!, step: TOTP.standard.step(at: clock.now())) }
        var pendingSecret: TOTPSecret?
        guard case .enrolmentStarted(let pending) = try session.settingsWritePath().execute(
            .startEnrolment(ana, approver: nil), actor: ana.rawValue, code: nil)
        else { Issue.record("no enrolment started"); return }
        pendingSecret = pending.secret
        _ = try session.settingsWritePath().execute(.confirmEnrolment(ana), actor: ana.rawValue, code: code())

        // Without the operator's code the key is not stored.
        #expect(throws: SettingsWritePath.Failure.self) {
            try StepUpMethods.enrolSecurityKey(session: session, device: device, pin: nil, code: nil, notice: { _ in })
        }
        clock.advance(by: Instant.Duration(microseconds: 30_000_000))
        var notices: [String] = []
        _ = try StepUpMethods.enrolSecurityKey(
            session: session, device: device, pin: nil, code: code(), notice: { notices.append($0) })
        #expect(notices.first?.hasPrefix("touch your security key to enrol it for ana@laptop") == true)

        let request = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 100))), actor: ana.rawValue, reason: "all clear", origin: "TEST")
        let approved = try StepUpMethods.approveWithSecurityKey(
            request, on: try session.writePath(), device: device, pin: nil, notice: { notices.append($0) })
        let evidence = try #require(approved.secondFactor)
        let document = try #require(ChangeDocument(canonical: evidence.document))
        #expect(document.store == path)
        #expect(notices.last?.contains("set 0% -> 100%") == true)
        guard case .published(let stored, _, _) = try session.writePath().execute(approved) else {
            Issue.record("not published")
            return
        }
        #expect(stored.info.number == 2)
        // What `audit verify` lists: the approval, verified again from its record.
        let approvals = try StepUpMethods.recordedApprovals(session)
        #expect(approvals.count == 1)
        #expect(approvals.first?.approval.outcome.isAccepted == true)
        #expect(approvals.first?.approval.document.summary.hasPrefix("set 0% -> 100% of ") == true)
        // A change that needs no second factor is left as it is: the key is not asked.
        let kill = WritePath.Request(intent: .rollout(.kill), actor: ana.rawValue, reason: "", origin: "TEST")
        #expect(try StepUpMethods.approveWithSecurityKey(kill, on: try session.writePath(), device: device, pin: nil, notice: { _ in }).secondFactor == nil)
        #expect(key.commands.filter { $0 == 0x02 }.count == 1)
    }
}
