@testable import Console
import Rollout
import Testing
import Timekeeping

/// The condition panel's App Check row: each service's mode, ENFORCED first, a change's 15-minute window, and
/// what does not fit counted rather than cut.
struct EnforcementPanelTests {
    static let now = Instant(seconds: 1_780_000_000)

    @Test func enforcedFirstWithTheWindowOfARecentChange() {
        let line = PanelText.enforcementLine(
            [
                EnforcementInfo(service: "firebasestorage.googleapis.com", mode: .off),
                EnforcementInfo(service: "firestore.googleapis.com", mode: .enforced, appliesBy: Self.now + .minutes(15)),
                EnforcementInfo(service: "firebasedatabase.googleapis.com", mode: .unenforced),
            ], width: 200)
        let text = line.map(\.text).joined()
        #expect(
            text == "firestore ENFORCED (applies by \(Format.time(Self.now + .minutes(15)).prefix(5))) · firebasedatabase UNENFORCED · firebasestorage OFF",
            "\(text)")
    }

    @Test func theMostEnforcedServiceShowsEvenWhenNarrow() {
        let text = PanelText.enforcementLine(
            [
                EnforcementInfo(service: "firestore.googleapis.com", mode: .enforced, appliesBy: Self.now),
                EnforcementInfo(service: "firebasestorage.googleapis.com", mode: .off),
            ], width: 20
        ).map(\.text).joined()
        #expect(text.hasPrefix("firestore ENFORCED"), "\(text)")
        #expect(text.hasSuffix(" +1"), "\(text)")
    }

    @Test func whatDoesNotFitIsCounted() {
        let services = (1...6).map { EnforcementInfo(service: "service\($0).googleapis.com", mode: .off) }
        let text = PanelText.enforcementLine(services, width: 40).map(\.text).joined()
        #expect(text.count <= 40, "\(text)")
        #expect(text.hasPrefix("service1 OFF"), "\(text)")
        #expect(text.range(of: #" \+\d$"#, options: .regularExpression) != nil, "\(text)")
    }
}
