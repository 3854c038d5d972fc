import Foundation
import Rollout
import RolloutApp
import StepUp
import Testing
import TestSupport
import Timekeeping

/// The two-person rule for App Check ENFORCED through the settings write path (what `rollout enforcement set ...
/// enforced` and `rollout approve` run before anything is sent to Firebase), on a store file opened through
/// `Wiring`: the first operator's code records a request; only a second operator's code applies it, once.
@Suite("Two-person rule for App Check enforcement ENFORCED")
struct TwoPersonEnforcementTests {
    @Test func enforcedNeedsASecondOperator() throws {
        let directory = try TestSupport.temporaryDirectory("two-person-enforcement")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = ManualClock(Instant(seconds: 1_780_000_005))
        let path = directory.appendingPathComponent("app.rollout").path
        let session = try Wiring.createStore(path: path, seed: "rollout-test", operatorID: "ana@laptop", clock: clock)
            .rolloutSession()
        let settings = try session.settingsWritePath()
        var secrets: [String: TOTPSecret] = [:]
        func code(_ who: String) -> String {
            TOTP.standard.code(secret: secrets[who]!, step: TOTP.standard.step(at: clock.now()))
        }
        func step() { clock.advance(by: Instant.Duration(microseconds: 30_000_000)) }
        for (who, approver) in [("ana@laptop", nil), ("bob@desk", "ana@laptop")] as [(String, String?)] {
            let id = try OperatorID(who)
            guard case .enrolmentStarted(let pending) = try settings.execute(
                .startEnrolment(id, approver: try approver.map(OperatorID.init)), actor: approver ?? who,
                code: approver.map(code))
            else { Issue.record("no enrolment started for \(who)"); return }
            secrets[who] = pending.secret
            _ = try settings.execute(.confirmEnrolment(id), actor: who, code: code(who))
            step()
        }
        _ = try settings.execute(.setting(key: "two-person", value: "on"), actor: "ana@laptop", code: code("ana@laptop"))
        step()

        let enforce = SettingsWritePath.Intent.appCheck(
            .enforcementRequest(service: "firestore.googleapis.com", from: .unenforced, to: .enforced, reason: "100% for a day"))
        var message = ""
        do {
            _ = try settings.execute(enforce, actor: "ana@laptop", code: code("ana@laptop"))
            Issue.record("ENFORCED by one operator was not held")
        } catch let SettingsWritePath.Failure.refused(m, _) {
            message = m
        }
        #expect(message.contains("needs a second operator"), "\(message)")
        let marker = try #require(message.range(of: "recorded as request "))
        let id = String(message[marker.upperBound...].prefix(16))
        let request = try #require(try TwoPersonSettingsRequest.find(id, in: session))
        #expect(request.intent == enforce && request.requester == "ana@laptop")
        #expect(request.change == "enforcement firestore.googleapis.com UNENFORCED → ENFORCED")

        // Not by the requester; by bob (Firebase then holds ENFORCED, so the same request changes nothing twice).
        step()
        #expect(throws: SettingsWritePath.Failure.self) {
            try settings.execute(enforce, actor: "ana@laptop", code: code("ana@laptop"), approving: request)
        }
        step()
        guard case .appCheckChanged = try settings.execute(enforce, actor: "bob@desk", code: code("bob@desk"), approving: request)
        else { Issue.record("bob's approval did not apply the request"); return }
        let audit = try session.templates.auditRecords(limit: 50, before: nil).map(\.entry)
        #expect(audit.contains { $0.detail.hasPrefix("result approved; two-person-request \(id); requested-by ana@laptop") })
        #expect(audit.contains { $0.detail.hasPrefix("result self-approval; two-person-request \(id)") })

        // UNENFORCED (metrics only) is not held.
        step()
        let metrics = SettingsWritePath.Intent.appCheck(
            .enforcementRequest(service: "firebasestorage.googleapis.com", from: .off, to: .unenforced, reason: "metrics"))
        guard case .appCheckChanged = try settings.execute(metrics, actor: "ana@laptop", code: code("ana@laptop")) else {
            Issue.record("UNENFORCED was held")
            return
        }
    }
}
