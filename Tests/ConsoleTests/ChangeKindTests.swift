import Console
import RemoteConfig
import Rollout
import Testing

/// A change's kind is the core's `Proposal.Kind`; a change made outside rollout has none and shows as `external`.
@Suite("change kinds")
struct ChangeKindTests {
    static func record(_ kind: Proposal.Kind?, version: String = "43") -> ChangeRecord {
        ChangeRecord(
            version: version, at: Fixture.at(30), actor: "console@example.com", kind: kind,
            from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
            to: RolloutPosition(microPercent: MicroPercent(15_000_000)),
            reason: "edited in the Firebase console")
    }

    @Test("the history words are the core's kind names, and external for a change made elsewhere")
    func words() {
        #expect(Self.record(.set).kindText == "set")
        #expect(Self.record(.nudge).kindText == "nudge")
        #expect(Self.record(.rollback).kindText == "rollback")
        #expect(Self.record(.importTemplate).kindText == "import")
        #expect(Self.record(nil).kindText == "external")
    }

    @Test("the main screen's log names an external change as external")
    func externalOnScreen() {
        var model = Fixture.model()
        model.changes.insert(Self.record(nil), at: 0)
        let size = Size(width: 120, height: 40)
        let lines = ConsoleScreen.render(Fixture.state(model, size: size), size: size).lines
        let row = lines.first { $0.contains("edited in the Firebase console") }
        #expect(row?.contains("external") == true, "\(lines.joined(separator: "\n"))")
        #expect(row?.contains("12.5% → 15%") == true, "\(lines.joined(separator: "\n"))")
    }
}
