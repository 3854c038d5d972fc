import Crypto
import StepUp
import Testing
import Timekeeping

/// The gate with an injected clock, driven through a stand-in for the write path: decide, store the record
/// and the audit event whatever the verdict, publish only when allowed.
@Suite("Step-up verification and lockout")
struct StepUpGateTests {
    static let pct: Int64 = 1_000_000
    /// 15 s into a time step (1_779_999_990 is a multiple of 30), so that ±1 step is unambiguous.
    static let start = Instant(seconds: 1_780_000_005)

    struct WritePath {
        var gate = StepUpGate(policy: .standard)
        let clock = ManualClock(StepUpGateTests.start)
        var percent: Int64 = 10 * StepUpGateTests.pct
        var record: OperatorRecord
        var enforced = true
        var audit: [StepUpAuditEvent] = []

        init(secret: TOTPSecret = .generate()) {
            record = OperatorRecord(
                id: try! OperatorID("ana@laptop"), secret: secret, enrolledAt: StepUpGateTests.start - .days(1))
        }

        /// The code ana's phone shows `steps` time steps from now.
        func code(_ steps: Int64 = 0) -> String {
            TOTP.standard.code(secret: record.secret, step: TOTP.standard.step(at: clock.now()) + steps)
        }

        @discardableResult
        mutating func apply(_ change: StepUpChange, code: String?) -> StepUpDecision {
            let d = gate.authorize(
                change, by: record.id, code: code, record: enforced ? record : nil, enforced: enforced, at: clock.now())
            if let r = d.record { record = r }
            if let e = d.event { audit.append(e) }
            if d.isAllowed { percent = change.to }
            return d
        }

        @discardableResult
        mutating func raise(to p: Int64, code: String?) -> StepUpDecision {
            apply(StepUpChange(.set, from: percent, to: p * StepUpGateTests.pct), code: code)
        }
    }

    @Test func aProtectedChangeGoesAheadWithTheCurrentCode() {
        var w = WritePath()
        let d = w.raise(to: 30, code: w.code())
        #expect(d.verdict == .accepted)
        #expect(d.reasons == [.largeIncrease(points: 20 * Self.pct, limit: 10 * Self.pct)])
        #expect(w.percent == 30 * Self.pct)
        #expect(w.record.lastAcceptedStep == TOTP.standard.step(at: Self.start))
        #expect(w.audit.map(\.result) == ["accepted"])
        let e = w.audit[0]
        #expect(e.operatorID.rawValue == "ana@laptop")
        #expect(e.at == Self.start)
        #expect(e.action == "set 10% -> 30%")
        #expect(e.reasons == ["large-increase"])
    }

    @Test func eachDefaultRuleDemandsACode() {
        let changes: [StepUpChange] = [
            StepUpChange(.set, from: 10 * Self.pct, to: 25 * Self.pct),
            StepUpChange(.nudge, from: 45 * Self.pct, to: 55 * Self.pct),
            StepUpChange(.nudge, from: 95 * Self.pct, to: 100 * Self.pct),
            StepUpChange(.rollback, from: 30 * Self.pct, to: 20 * Self.pct),
            StepUpChange(.set, from: 10 * Self.pct, to: 11 * Self.pct, force: true),
            StepUpChange(.set, from: 10 * Self.pct, to: 11 * Self.pct, guardrailOverride: true),
            StepUpChange(.policyChange, detail: "increase-over 20"),
            StepUpChange(.operatorEnroll, detail: "bob"),
            StepUpChange(.operatorRemove, detail: "bob"),
        ]
        for change in changes {
            var w = WritePath()
            let before = w.percent
            let refused = w.apply(change, code: nil)
            #expect(refused.verdict == .refused, "\(change.summary)")
            #expect(refused.outcome == .missing)
            #expect(w.percent == before, "store unchanged after \(change.summary)")
            let accepted = w.apply(change, code: w.code())
            #expect(accepted.verdict == .accepted, "\(change.summary)")
            #expect(w.audit.map(\.result) == ["missing", "accepted"])
        }
    }

    @Test func smallIncreasesDecreasesAndKillsNeedNoCode() {
        var w = WritePath()
        for change in [
            StepUpChange(.nudge, from: 10 * Self.pct, to: 15 * Self.pct),
            StepUpChange(.set, from: 15 * Self.pct, to: 5 * Self.pct),
            StepUpChange(.kill, from: 5 * Self.pct, to: 0),
        ] {
            let d = w.apply(change, code: nil)
            #expect(d.verdict == .notRequired)
            #expect(d.event == nil && d.record == nil && d.refusal == nil)
        }
        #expect(w.percent == 0)
        #expect(w.audit.isEmpty)
    }

    @Test func nothingIsEnforcedUntilAnOperatorIsEnrolled() {
        var w = WritePath()
        w.enforced = false
        let d = w.raise(to: 100, code: nil)
        #expect(d.verdict == .notRequired)
        #expect(w.percent == 100 * Self.pct)
        #expect(w.gate.requirement(for: StepUpChange(.rollback), enforced: false) == [])
        #expect(w.gate.requirement(for: StepUpChange(.rollback), enforced: true) == [.rollback])
    }

    @Test func missingWrongReplayedAndExpiredCodesAreRefused() throws {
        var w = WritePath()
        let wrong = w.code() == "000000" ? "000001" : "000000"
        for (code, result) in [
            (nil, "missing"), ("", "missing"), ("12345", "malformed"), ("12a456", "malformed"), (wrong, "wrong"),
        ] {
            let d = w.raise(to: 30, code: code)
            #expect(d.verdict == .refused)
            #expect(d.outcome?.result == result)
            #expect(d.refusal != nil)
            #expect(w.percent == 10 * Self.pct)
        }
        // Missing and malformed codes are not guesses; the wrong one is.
        #expect(w.record.failedAttempts == 1)
        #expect(
            w.raise(to: 30, code: wrong).refusal?.description
                == "wrong code for ana@laptop (1 attempt left before a lockout): set 10% -> 30% needs a fresh code "
                + "(an increase of 20 points, more than 10)")
        #expect(
            w.raise(to: 30, code: nil).refusal?.description.hasSuffix(
                ": enter the current code of ana@laptop's authenticator") == true)
        w.record.failedAttempts = 0

        // Expired: the code of 2 and 5 steps ago (a phone clock running late).
        for offset: Int64 in [-2, -5] {
            var fresh = WritePath()
            let d = fresh.raise(to: 30, code: fresh.code(offset))
            #expect(d.outcome == .expired(stepOffset: offset))
            #expect(d.verdict == .refused)
            #expect(fresh.record.failedAttempts == 1)
            #expect(fresh.percent == 10 * Self.pct)
            #expect(d.event?.fields.contains { $0.key == "stepOffset" && $0.value == .integer(offset) } == true)
        }

        // Replayed: the same code twice, even for another change, even within its window.
        var r = WritePath()
        let code = r.code()
        #expect(r.raise(to: 30, code: code).verdict == .accepted)
        r.clock.advance(by: .seconds(Int64(10)))
        let replay = r.raise(to: 45, code: code)
        #expect(replay.verdict == .refused)
        #expect(
            replay.outcome == .replayed(nextCodeAt: TOTP.standard.start(ofStep: TOTP.standard.step(at: Self.start) + 1))
        )
        #expect(r.percent == 30 * Self.pct)
        #expect(r.record.failedAttempts == 0)
        // The previous step's code is older than the accepted one: also a replay, never accepted.
        #expect(r.raise(to: 45, code: r.code(-1)).outcome?.result == "replayed")
        // The next code is accepted at once (within the window), then time moves on.
        #expect(r.raise(to: 45, code: r.code(1)).verdict == .accepted)
        r.clock.advance(by: .seconds(Int64(60)))
        #expect(r.raise(to: 60, code: r.code()).verdict == .accepted)
        #expect(r.audit.map(\.result) == ["accepted", "replayed", "replayed", "accepted", "accepted"])
    }

    @Test func codesOfTheNeighbouringStepsAreAccepted() {
        for offset: Int64 in [-1, 0, 1] {
            var w = WritePath()
            let d = w.raise(to: 30, code: w.code(offset))
            #expect(d.outcome == .accepted(step: TOTP.standard.step(at: Self.start) + offset))
        }
        var spaced = WritePath()
        let c = spaced.code()
        #expect(spaced.raise(to: 30, code: String(c.prefix(3)) + " " + String(c.suffix(3))).verdict == .accepted)
    }

    @Test func threeWrongCodesLockOutForFifteenMinutesAndKillStillWorks() throws {
        var w = WritePath()
        let wrong = w.code() == "000000" ? "000001" : "000000"
        #expect(w.raise(to: 30, code: wrong).event?.failedAttempts == 1)
        w.clock.advance(by: .seconds(Int64(5)))
        #expect(w.raise(to: 30, code: wrong).event?.failedAttempts == 2)
        w.clock.advance(by: .seconds(Int64(5)))
        let third = w.raise(to: 30, code: wrong)
        let until = Self.start + .seconds(Int64(10)) + .minutes(15)
        #expect(third.outcome == .wrong)
        #expect(third.event?.lockedUntil == until)
        #expect(w.record.lockedUntil == until)
        #expect(third.refusal?.description.contains("locked out until \(until.iso8601)") == true)

        // Locked out: the right code is refused without being looked at, and is not used up.
        w.clock.advance(by: .minutes(5))
        let right = w.code()
        let locked = w.raise(to: 30, code: right)
        #expect(locked.outcome == .lockedOut(until: until))
        #expect(locked.record == nil)
        #expect(w.percent == 10 * Self.pct)

        // Kill, a decrease and a small increase go ahead during the lockout.
        #expect(w.apply(StepUpChange(.kill, from: 10 * Self.pct, to: 0, force: true), code: nil).isAllowed)
        #expect(w.percent == 0)
        #expect(w.apply(StepUpChange(.resume, from: 0, to: 5 * Self.pct), code: nil).isAllowed)
        #expect(w.apply(StepUpChange(.set, from: 5 * Self.pct, to: 2 * Self.pct), code: nil).isAllowed)

        // One microsecond before the end: still locked. At the end: released with a fresh allowance.
        w.clock.set(until - .init(microseconds: 1))
        #expect(w.raise(to: 30, code: w.code()).outcome == .lockedOut(until: until))
        w.clock.set(until)
        let released = w.raise(to: 30, code: w.code())
        #expect(released.verdict == .accepted)
        #expect(w.record.lockedUntil == nil)
        #expect(w.record.failedAttempts == 0)
        #expect(w.percent == 30 * Self.pct)
        #expect(w.audit.map(\.result) == ["wrong", "wrong", "wrong", "locked-out", "locked-out", "accepted"])
    }

    /// A code of a step ahead of the window is `wrong`, like any other: saying it becomes valid later (and when)
    /// told a guesser which guess to keep and use then. Before, 3 steps ahead was "expired: valid only in 90 s",
    /// and the same code was accepted 90 s later.
    @Test func aCodeAheadOfTheWindowIsWrongAndSaysNothingMore() {
        for offset: Int64 in [2, 3, 11] {
            var w = WritePath()
            let ahead = w.code(offset)
            let d = w.raise(to: 30, code: ahead)
            #expect(d.outcome == .wrong, "offset \(offset)")
            #expect(d.refusal?.description.hasPrefix("wrong code for ana@laptop") == true)
            #expect(d.event?.fields.contains { $0.key == "stepOffset" } == false)
            #expect(w.record.failedAttempts == 1)
        }
    }

    /// State written by a machine whose clock is ahead: a lockout ten years long, an accepted step ten years
    /// ahead. Before, ana was locked out until 2036 (no command could lift it: settings need her code) and, once
    /// that ended, every code of hers was "already used" for ten years more.
    @Test func aLockoutOrAStepFromAClockAheadIsBelievedOnlyAsFarAsThisClockGoes() {
        var w = WritePath()
        let tenYears = Instant.Duration.days(3650)
        w.record.failedAttempts = 3
        w.record.lockedUntil = Self.start + tenYears + .minutes(15)
        let locked = w.raise(to: 30, code: w.code())
        let until = Self.start + .minutes(15)
        #expect(locked.outcome == .lockedOut(until: until))
        #expect(w.record.lockedUntil == until, "stored shortened, so that it ends")
        w.clock.set(until)
        #expect(w.raise(to: 30, code: w.code()).verdict == .accepted)

        var s = WritePath()
        let now = TOTP.standard.step(at: Self.start)
        s.record.lastAcceptedStep = now + 10 * 365 * 2880
        let replay = s.raise(to: 30, code: s.code())
        #expect(replay.outcome?.result == "replayed", "no code of the window is accepted twice")
        #expect(s.record.lastAcceptedStep == now + 1)
        s.clock.advance(by: .seconds(Int64(60)))
        #expect(s.raise(to: 30, code: s.code()).verdict == .accepted, "the next code but one goes ahead")

        // Within the clocks' ordinary disagreement nothing changes.
        var o = WritePath()
        o.record.lastAcceptedStep = now + 1
        o.record.lockedUntil = Self.start + .minutes(14)
        #expect(o.raise(to: 30, code: o.code()).outcome == .lockedOut(until: Self.start + .minutes(14)))
        #expect(o.record.lastAcceptedStep == now + 1)
    }

    @Test func aWrongCodeAfterALockoutEndsStartsAFreshCount() {
        var w = WritePath()
        let wrong = w.code() == "000000" ? "000001" : "000000"
        for _ in 0..<3 { w.raise(to: 30, code: wrong) }
        w.clock.advance(by: .minutes(15))
        let d = w.raise(to: 30, code: wrong)
        #expect(d.outcome == .wrong)
        #expect(w.record.failedAttempts == 1)
        #expect(w.record.lockedUntil == nil)
    }

    @Test func anAcceptedCodeResetsTheCount() {
        var w = WritePath()
        let wrong = w.code() == "000000" ? "000001" : "000000"
        w.raise(to: 30, code: wrong)
        w.raise(to: 30, code: wrong)
        #expect(w.raise(to: 30, code: w.code()).verdict == .accepted)
        #expect(w.record.failedAttempts == 0)
        w.clock.advance(by: .seconds(Int64(30)))
        w.raise(to: 50, code: wrong)
        #expect(w.record.lockedUntil == nil)
    }

    @Test func lockoutIsConfigurable() throws {
        var w = WritePath()
        w.gate = StepUpGate(
            policy: try StepUpPolicy.standard.setting("lockout-attempts", "1").setting("lockout-minutes", "2"))
        let wrong = w.code() == "000000" ? "000001" : "000000"
        #expect(w.raise(to: 30, code: wrong).event?.lockedUntil == Self.start + .minutes(2))
        w.clock.advance(by: .minutes(2))
        #expect(w.raise(to: 30, code: w.code()).verdict == .accepted)
    }

    @Test func anOperatorWhoIsNotEnrolledIsRefusedWhileStepUpIsOn() {
        let gate = StepUpGate(policy: .standard)
        let d = gate.authorize(
            StepUpChange(.rollback), by: try! OperatorID("bob"), code: "123456", record: nil, enforced: true,
            at: Self.start)
        #expect(d.verdict == .refused)
        #expect(d.outcome == .notEnrolled)
        #expect(d.event?.result == "not-enrolled")
        #expect(d.refusal?.description.contains("bob is not enrolled") == true)
    }

    @Test func eventsAndMessagesCarryNeitherTheCodeNorTheSecret() {
        var w = WritePath()
        let wrong = w.code(-4)  // an expired code, so that it is a real code of this secret
        var texts: [String] = []
        for (code, target) in [(wrong, Int64(30)), (w.code(), 30), (w.code(), 60)] {
            let d = w.raise(to: target, code: code)
            texts.append(String(describing: d))
            texts.append(d.refusal?.description ?? "")
            texts += d.event.map { e in e.fields.map { "\($0.key)=\($0.value)" } } ?? []
            #expect(!texts.joined().contains(code))
        }
        let all = texts.joined(separator: "\n")
        #expect(!all.contains(w.record.secret.base32))
        #expect(!all.contains(Hex.encode(w.record.secret.bytes)))
        #expect(w.audit.map(\.result) == ["expired", "accepted", "replayed"])
    }

    @Test func auditFieldsInAFixedOrder() {
        var w = WritePath()
        let wrong = w.code() == "000000" ? "000001" : "000000"
        for _ in 0..<3 { w.raise(to: 60, code: wrong) }
        let e = w.audit[2]
        #expect(
            e.fields.map(\.key) == [
                "operator", "at", "action", "kind", "reasons", "result", "failedAttempts", "lockedUntil",
            ])
        #expect(e.fields[4].value == .list(["large-increase", "crosses-50"]))
        #expect(e.fields[7].value == .text((Self.start + .minutes(15)).iso8601))
    }
}
