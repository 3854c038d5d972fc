import Console
import Rollout
import Testing

/// A read-only console (`--read-only`, or a store file this user cannot write, as the data source says in
/// `HeaderInfo.readOnlyCause`) refuses every write key before any dialog, in the write path's words for its cause:
/// no dialog offers a Publish that would be refused.
@Suite("Read-only console")
struct ReadOnlyConsoleTests {
    @Test(
        "every write key is refused with the cause and asks for no preview",
        arguments: ["+", "-", "K", "r", "u", "=", "X", "x"])
    func writesRefused(_ key: Character) {
        for cause in [ReadOnlyCause.requested, .storeFileNotWritable("/srv/rollout/rollout.db")] {
            var model = Fixture.model()
            model.header.readOnly = true
            model.header.readOnlyCause = cause
            var s = Fixture.state(model)
            let effects = s.handle(.key(.character(key)))
            #expect(effects.isEmpty, "\(effects)")
            #expect(s.overlay == nil, "\(String(describing: s.overlay))")
            #expect(s.notice?.kind == .error)
            #expect(s.notice?.text == "Refused: " + cause.description, "\(String(describing: s.notice))")
        }
    }
}
