import CommandLineKit
import RemoteConfig
import Rollout
import RolloutApp
import Testing
import Timekeeping

/// Each typed refusal of the write path ends a CLI command with README's exit code, whatever its words say.
@Suite("refusal exit codes")
struct RefusalExitCodeTests {
    static let report: WritePath.ConflictReport = {
        let info = VersionInfo(
            number: 7, etag: "e7", updateTime: Instant(microseconds: 0), updateUser: "bo@example.com", updateOrigin: "ROLLOUT_CLI",
            updateType: .incremental, description: "")
        return WritePath.ConflictReport(
            winner: info, winnerChange: "set 5% → 10%", current: StoredTemplate(template: try! RolloutPlan.initialTemplate(seed: "s"), info: info))
    }()

    static func refusal(_ kind: PolicyRefusal.Kind, _ reason: String = "nothing to change") -> PolicyRefusal {
        PolicyRefusal(policy: "p", reason: reason, kind: kind)
    }

    @Test(
        "every refusal maps to its documented code",
        arguments: [
            (WriteRefusal.nothingToChange(summary: "refused: at 10%"), ExitCode.ok),
            (.guardrail(refusal(.guardrail)), .refused),
            (.stepUpNeeded(refusal(.stepUpNeeded)), .refused),
            (.stepUpFailed(refusal(.stepUpFailed)), .refused),
            (.stepUpBlocked(refusal(.stepUpBlocked)), .refused),
            (.policy(refusal(.other, "publish conflict")), .refused),
            (.readOnly(.requested), .refused),
            (.readOnly(.storeFileNotWritable("/srv/rollout.db")), .refused),
            (.conflict(report), .conflict),
            (.unexpectedCurrent("refused: at 12%"), .conflict),
            (.plan(.notKilled(.rolling)), .failure),
            (.invalidPercentage("the target 101% is outside 0 to 100"), .usage),
            (.invalid("refused: no version 9"), .failure),
        ] as [(WriteRefusal, ExitCode)])
    func exitCode(refusal: WriteRefusal, code: ExitCode) {
        #expect(ExitCode(refusal) == code)
    }

    @Test("the write path's failure becomes the refusal of its kind, so its exit code follows the kind")
    func fromFailure() {
        #expect(ExitCode(WriteRefusal(.refused(Self.refusal(.guardrail)))) == .refused)
        #expect(ExitCode(WriteRefusal(.readOnly(.requested))) == .refused)
        #expect(ExitCode(WriteRefusal(.conflict(Self.report))) == .conflict)
        #expect(ExitCode(WriteRefusal(.plan(.notKilled(.rolling)))) == .failure)
        guard case .stepUpNeeded = WriteRefusal(.refused(PolicyRefusal(policy: "step-up", reason: "r", needsStepUpCode: true))) else {
            Issue.record("a refusal that needs a code is step-up needed")
            return
        }
        #expect(WriteRefusal(.refused(Self.refusal(.stepUpFailed))).commandLineText.hasSuffix("(add --code CODE from your authenticator app)"))
        #expect(!WriteRefusal(.refused(Self.refusal(.stepUpBlocked))).commandLineText.contains("--code"))
    }
}
