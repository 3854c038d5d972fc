import Testing
import Timekeeping

@testable import Telemetry

/// App Check enforcement in the one assessment, on data alone: ENFORCED while the flag does not give App Attest to
/// everyone is HALT; unreadable enforcement last read ENFORCED is HOLD.
@Suite("Enforcement finding")
struct EnforcementFindingTests {
    static let readAt = Instant(seconds: 1_780_000_000)
    static let firestore = "firestore.googleapis.com"

    static func finding(_ e: EnforcementReading?, percent: Int64) -> Finding? {
        var context = RolloutContext(currentMicroPercent: percent * 1_000_000)
        context.enforcement = e
        let a = WatchFixture().snapshot(at: 0).assess(context)
        return a.verdict.findings.first { $0.text.contains("App Check") }
    }

    @Test func enforcedBelowEveryoneHalts() throws {
        let enforced = EnforcementReading(
            modes: [Self.firestore: "ENFORCED", "firebasestorage.googleapis.com": "UNENFORCED"], readAt: Self.readAt)
        let killed = try #require(Self.finding(enforced, percent: 0))
        #expect(killed.level == .halt)
        #expect(
            killed.text.hasPrefix(
                "App Check enforces firestore.googleapis.com while the flag gives App Attest to nobody"))
        #expect(killed.text.contains("run 'rollout enforcement set firestore.googleapis.com unenforced --reason TEXT'"))
        let lowered = try #require(Self.finding(enforced, percent: 50))
        #expect(lowered.level == .halt)
        #expect(lowered.text.contains("gives App Attest to 50% of installations only"))
        #expect(Self.finding(enforced, percent: 100) == nil)
    }

    @Test func nothingEnforcedIsNoFinding() {
        let none = EnforcementReading(modes: [Self.firestore: "UNENFORCED"], readAt: Self.readAt)
        #expect(Self.finding(none, percent: 0) == nil)
        #expect(Self.finding(EnforcementReading(modes: [:], readAt: Self.readAt), percent: 0) == nil)
        #expect(Self.finding(nil, percent: 0) == nil)
    }

    @Test func unreadableIsNeverOKUnderAKill() throws {
        let lastEnforced = EnforcementReading(
            modes: [Self.firestore: "ENFORCED"], readAt: Self.readAt, failure: "timeout")
        let hold = try #require(Self.finding(lastEnforced, percent: 0))
        #expect(hold.level == .hold)
        #expect(hold.text.hasPrefix("App Check enforcement could not be read (timeout); at "))
        // Never read, or last read with nothing enforced: shown as unknown by status, no finding (a credential that
        // may not read App Check must not hold the verdict at WATCH all ramp long).
        #expect(Self.finding(EnforcementReading(modes: [:], readAt: nil, failure: "timeout"), percent: 0) == nil)
        #expect(
            Self.finding(EnforcementReading(modes: [:], readAt: Self.readAt, failure: "timeout"), percent: 0) == nil)
        #expect(Self.finding(lastEnforced, percent: 100) == nil)
    }
}
