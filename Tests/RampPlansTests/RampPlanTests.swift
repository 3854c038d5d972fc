import RampPlans
import RemoteConfig
import Rollout
import Telemetry
import Testing
import Timekeeping

struct RampPlanFileTests {
    static let example = """
        name ramp   # the plan's name
        gate ok-for 30m
        gate users 500
        gate sessions 2000
        gate propagation 90%
        gate load 80%
        timeout 6h
        on watch wait
        on halt pause
        step 5% hold 1h
        step 10% hold 1h users 1000 window 09:00-17:00
        step 25.5% hold 2h timeout 1h
        step 100
        """

    @Test func readsEveryStatement() throws {
        let plan = try RampPlan.parse(Self.example)
        #expect(plan.name == "ramp")
        #expect(plan.steps.map(\.target) == [.init(percent: 5), .init(percent: 10), .init(25_500_000), .hundred])
        #expect(plan.steps.map(\.line) == [10, 11, 12, 13])
        #expect(plan.steps[0].hold == .hours(1))
        #expect(plan.steps[3].hold == .seconds(Int64(0)))
        #expect(plan.steps[0].gates.minimumExposedUsers == 500)
        #expect(plan.steps[1].gates.minimumExposedUsers == 1000)
        #expect(plan.steps[1].gates.window == TimeOfDayWindow(startMinute: 540, endMinute: 1020))
        #expect(plan.steps[0].gates.window == nil)
        #expect(plan.steps[2].gates.okFor == .minutes(30))
        #expect(plan.steps[2].gates.minimumExposedSessions == 2000)
        #expect(plan.steps[2].gates.minimumPropagation == MicroPercent(percent: 90))
        #expect(plan.steps[2].gates.maximumLoad == MicroPercent(percent: 80))
        #expect(plan.steps[0].timeout == .hours(6))
        #expect(plan.steps[2].timeout == .hours(1))
        #expect(plan.actions == RampActions(onWatch: .wait, onHold: .wait, onHalt: .pause))
        #expect(plan.source == Self.example)
        #expect(plan.reason(step: 3) == "plan 'ramp' step 3/4: 25.5%")
    }

    @Test func defaultsAreDocumented() throws {
        let plan = try RampPlan.parse("name p\nstep 50%")
        #expect(plan.actions == RampActions(onWatch: .pause, onHold: .wait, onHalt: .kill))
        #expect(plan.steps[0].gates == RampGates())
        #expect(plan.steps[0].timeout == nil)
    }

    @Test(arguments: [
        ("name p\nstep 5%\nstep 5%", 3, "steps must go up: 5% after 5% (line 2)"),
        ("name p\nstep 10%\nstep 5%", 3, "steps must go up"),
        ("name p\nstep 0%", 2, "above 0%"),
        ("name p\nstep 101%", 2, "out of range 0 to 100"),
        ("name p\nstep 1.0000001%", 2, "invalid percentage"),
        ("name p\nstep abc", 2, "invalid percentage"),
        ("name p\nstep 5% hold", 2, "'hold' needs a value"),
        ("name p\nstep 5% hold 1x", 2, "is not a duration"),
        ("name p\nstep 5% hold 1h colour red", 2, "unknown gate 'colour'"),
        ("name p\nstep 5% protected", 2, "the step-up policy decides"),
        ("name p\n\n# c\ngate users -3\nstep 5%", 4, "not a whole number"),
        ("name p\ngate window 25:00-01:00\nstep 5%", 2, "time-of-day window"),
        ("name p\ngate window 09:00-09:00\nstep 5%", 2, "time-of-day window"),
        ("name p\non halt wait\nstep 5%", 2, "'kill' or 'pause'"),
        ("name p\non watch kill\nstep 5%", 2, "'pause' or 'wait'"),
        ("name p\non ok pause\nstep 5%", 2, "watch, hold or halt"),
        ("name p\ntimeout 0s\nstep 5%", 2, "longer than 0s"),
        ("name p\nname q\nstep 5%", 2, "already has a name"),
        ("name two words\nstep 5%", 1, "one word"),
        ("name p\nramp 5%", 2, "unknown statement 'ramp'"),
        ("step 5%", 0, "no 'name' line"),
        ("name p\n", 0, "no 'step' line"),
        ("name p\nstep 50%\nstep enforce firestore.googleapis.com", 3, "needs a step of 100% before it"),
        ("name p\nstep enforce firestore.googleapis.com\nstep 100%", 2, "needs a step of 100% before it"),
        ("name p\nstep 100%\nstep enforce", 3, "takes one service"),
        ("name p\nstep 100%\nstep enforce a.googleapis.com hold 1h", 3, "takes one service"),
        ("name p\nstep 100%\nstep enforce Firestore", 3, "is not a service id"),
        ("name p\nstep 100%\nstep enforce a.b\nstep enforce a.b", 4, "enforced twice"),
        ("name p\nstep 10%\nstep 100%\nstep enforce a.b\nstep 20%", 5, "enforcement comes last"),
    ])
    func refusesWithItsLine(text: String, line: Int, message: String) {
        #expect {
            try RampPlan.parse(text)
        } throws: { error in
            guard let e = error as? RampPlanError else { return false }
            return e.line == line && e.message.contains(message)
        }
    }

    @Test func enforcementStepsFollowTheLastStep() throws {
        let plan = try RampPlan.parse(
            "name end\nstep 50%\nstep 100% hold 2h\nstep enforce firestore.googleapis.com\nstep enforce firebasestorage.googleapis.com")
        #expect(plan.steps.map(\.target) == [.init(percent: 50), .hundred])
        #expect(plan.enforcements == ["firestore.googleapis.com", "firebasestorage.googleapis.com"])
        #expect(plan.stepCount == 4)
        #expect(plan.reason(step: 3) == "plan 'end' step 3/4: enforce firestore.googleapis.com")
        #expect(plan.reason(step: 2) == "plan 'end' step 2/4: 100%")
    }

    @Test func windowsWrapMidnight() {
        let night = TimeOfDayWindow(startMinute: 22 * 60, endMinute: 6 * 60)
        let day = Instant(seconds: 1_780_000_000 / 86_400 * 86_400)  // 00:00 UTC
        #expect(night.contains(day))
        #expect(night.contains(day + .hours(23)))
        #expect(!night.contains(day + .hours(6)))
        #expect(!night.contains(day + .hours(12)))
        let office = TimeOfDayWindow(startMinute: 9 * 60, endMinute: 17 * 60)
        #expect(office.contains(day + .hours(9)))
        #expect(!office.contains(day + .hours(17)))
        #expect(office.description == "09:00-17:00 UTC")
    }

    @Test func durationsRoundTrip() throws {
        for text in ["0s", "45s", "5m", "1h30m", "2d3h", "1h0m1s"] {
            let d = try Instant.Duration.parse(text)
            #expect(try Instant.Duration.parse(d.compactText) == d)
        }
        #expect(try Instant.Duration.parse("90s").compactText == "1m30s")
        #expect(throws: DurationParseError.self) { try Instant.Duration.parse("5") }
        #expect(throws: DurationParseError.self) { try Instant.Duration.parse("m") }
        #expect(Instant.Duration.seconds(Int64(-300)).compactText == "-5m")
    }

    /// Durations whose sum or product overflowed stopped the process (a trap) when a plan added a hold and a
    /// timeout; every text is now at most 100 years, checked as it is read.
    @Test func durationsAreAtMost100Years() throws {
        #expect(try Instant.Duration.parse("36500d") == .days(36_500))
        for text in [
            "36501d", "36500d1s", String(repeating: "10000000d", count: 11), "99999999999h", "99999999999999999999999s",
        ] {
            #expect {
                try Instant.Duration.parse(text)
            } throws: { error in
                (error as? DurationParseError)?.tooLong == true && "\(error)".contains("longer than 36500d")
            }
        }
        let big = String(repeating: "10000000d", count: 6)
        #expect {
            try RampPlan.parse("name big\nstep 5% hold \(big) timeout \(big)\nstep 10%")
        } throws: { error in
            (error as? RampPlanError)?.line == 2 && "\(error)".contains("longer than 36500d")
        }
        // The longest plan the parser allows is decided without overflowing.
        let longest = try RampPlan.parse("name long\nstep 5% hold 36500d timeout 36500d\nstep 10%")
        var o = RampDecisionTests.good(5)
        o.exposedUsers = 0
        let state = RampState(reached: 1, reachedAt: RampDecisionTests.t0)
        #expect({ if case .wait = longest.decide(state, o, now: RampDecisionTests.t0 + .days(1)).action { true } else { false } }())
    }

    /// Files written on Windows (CRLF) or with a byte order mark read as the same plan.
    @Test func crlfAndAByteOrderMarkReadAsTheSamePlan() throws {
        var lf = try RampPlan.parse(Self.example)
        lf.source = ""
        let crlf = Self.example.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\r\n")
        for text in [crlf, "\u{FEFF}" + crlf, "\u{FEFF}" + Self.example] {
            var plan = try RampPlan.parse(text)
            #expect(plan.source == text)
            plan.source = ""
            #expect(plan == lf)
        }
        // A line number still counts CRLF lines.
        #expect {
            try RampPlan.parse("name p\r\n\r\nramp 5%\r\n")
        } throws: { error in
            (error as? RampPlanError)?.line == 3
        }
    }

    /// A plan's text quoted in an error shows what a terminal would act on escaped.
    @Test func quotedTextIsEscaped() {
        #expect {
            try RampPlan.parse("name p\nstep 5%\n\u{1b}[31mevil\u{202e} 1\n")
        } throws: { error in
            "\(error)".contains("'\\u001b[31mevil\\u202e'") && !"\(error)".contains("\u{1b}")
        }
    }

    /// 24:00 ends a day; as a start it is 00:00, and 24:00-00:00 (empty) is refused.
    @Test func windowsAt24() throws {
        #expect(throws: RampPlanError.self) { try RampPlan.parse("name w\ngate window 24:00-00:00\nstep 5%") }
        let late = try RampPlan.parse("name w\ngate window 24:00-06:00\nstep 5%")
        #expect(late.steps[0].gates.window == TimeOfDayWindow(startMinute: 0, endMinute: 360))
        let evening = try RampPlan.parse("name w\ngate window 18:00-24:00\nstep 5%")
        let day = Instant(seconds: 1_780_000_000 / 86_400 * 86_400)
        #expect(evening.steps[0].gates.window?.contains(day + .hours(23) + .minutes(59)) == true)
        #expect(evening.steps[0].gates.window?.contains(day) == false)
    }
}

struct RampDecisionTests {
    static let t0 = Instant(seconds: 1_780_000_000 / 86_400 * 86_400 + 12 * 3600)  // noon UTC
    static let plan = try! RampPlan.parse(
        """
        name ramp
        gate ok-for 30m
        gate users 100
        gate sessions 400
        gate propagation 90%
        gate load 50%
        timeout 2h
        step 5% hold 1h
        step 25% hold 1h
        step 100%
        """)

    static func rollout(_ percent: Int64?, killed: Bool = false) -> RolloutPlan? {
        guard let percent else { return try! RolloutPlan.locate(in: RolloutPlan.initialTemplate(seed: "s")) }
        var t = try! RolloutPlan.apply(
            .set(MicroPercent(percent: percent)), to: RolloutPlan.initialTemplate(seed: "s"), newSeed: "s")
        if killed { t = try! RolloutPlan.apply(.kill, to: t.template, newSeed: "s") }
        return t.after
    }

    /// An observation where every gate passes.
    static func good(_ percent: Int64?, level: VerdictLevel = .ok) -> RampObservation {
        RampObservation(
            level: level, reason: "because", rollout: rollout(percent), exposedUsers: 150, exposedSessions: 500,
            propagation: 0.95,
            attestationsPerSecond: 10, budgetPerSecond: 100)
    }

    static func at(_ step: Int, since: Instant = t0, okSince: Instant? = nil) -> RampState {
        RampState(reached: step, reachedAt: since, okSince: okSince)
    }

    @Test func firstStepIsPublishedAtOnce() {
        let d = Self.plan.decide(RampState(), Self.good(nil, level: .hold), now: Self.t0)
        #expect(d.action == .advance(step: 1, target: .init(percent: 5), reason: "plan 'ramp' step 1/3: 5%"))
    }

    @Test func firstStepWaitsForItsWindow() throws {
        let plan = try RampPlan.parse("name p\ngate window 13:00-14:00\nstep 5%")
        let d = plan.decide(RampState(), Self.good(nil), now: Self.t0)
        guard case .wait(let why, let gates) = d.action else { Issue.record("\(d.action)"); return }
        #expect(why.contains("outside the window 13:00-14:00 UTC"))
        #expect(gates.map(\.met) == [false])
        #expect(
            plan.decide(RampState(), Self.good(nil), now: Self.t0 + .hours(1)).action
                == .advance(step: 1, target: .init(percent: 5), reason: "plan 'p' step 1/1: 5%"))
    }

    @Test func holdsThenAdvancesWhenEveryGatePasses() {
        let state = Self.at(1, okSince: Self.t0)
        let early = Self.plan.decide(state, Self.good(5), now: Self.t0 + .minutes(59))
        guard case .wait(let why, let gates) = early.action else { Issue.record("\(early.action)"); return }
        #expect(why.contains("holding 5% until") && why.contains("(1m left)"))
        #expect(gates.count == 5 && gates.allSatisfy(\.met))
        let d = Self.plan.decide(state, Self.good(5), now: Self.t0 + .hours(1))
        #expect(d.action == .advance(step: 2, target: .init(percent: 25), reason: "plan 'ramp' step 2/3: 25%"))
        #expect(d.state.okSince == Self.t0)
    }

    @Test func theLastStepPublishedIsDone() {
        #expect(
            Self.plan.decide(Self.at(3), Self.good(100, level: .hold), now: Self.t0)
                == RampDecision(
                    action: .done("all 3 steps published"),
                    state: {
                        var s = Self.at(3)
                        s.okSince = nil
                        return s
                    }()))
    }

    @Test(arguments: [
        (
            "users",
            RampObservation(
                level: .ok, reason: "", rollout: rollout(5), exposedUsers: 99, exposedSessions: 500, propagation: 0.95,
                attestationsPerSecond: 10, budgetPerSecond: 100)
        ),
        (
            "sessions",
            RampObservation(
                level: .ok, reason: "", rollout: rollout(5), exposedUsers: 150, exposedSessions: 399, propagation: 0.95,
                attestationsPerSecond: 10, budgetPerSecond: 100)
        ),
        (
            "propagation",
            RampObservation(
                level: .ok, reason: "", rollout: rollout(5), exposedUsers: 150, exposedSessions: 500, propagation: 0.89,
                attestationsPerSecond: 10, budgetPerSecond: 100)
        ),
        (
            "propagation",
            RampObservation(
                level: .ok, reason: "", rollout: rollout(5), exposedUsers: 150, exposedSessions: 500, propagation: nil,
                attestationsPerSecond: 10, budgetPerSecond: 100)
        ),
        (
            "load",
            RampObservation(
                level: .ok, reason: "", rollout: rollout(5), exposedUsers: 150, exposedSessions: 500, propagation: 0.95,
                attestationsPerSecond: 50.1, budgetPerSecond: 100)
        ),
    ])
    func eachGateHoldsTheStep(gate: String, o: RampObservation) {
        let d = Self.plan.decide(Self.at(1, okSince: Self.t0), o, now: Self.t0 + .hours(1))
        guard case .wait(let why, let gates) = d.action else { Issue.record("\(d.action)"); return }
        #expect(gates.filter { !$0.met }.map(\.gate) == [gate])
        #expect(why.hasPrefix("gates: \(gate) "))
    }

    @Test func loadShowsItsValueAgainstTheBudget() {
        var o = Self.good(5)
        o.attestationsPerSecond = 60
        let gates = Self.plan.readings(Self.plan.steps[0], o, okSince: Self.t0, now: Self.t0 + .hours(1))
        let load = gates.first { $0.gate == "load" }!
        #expect(load.value == "60.0/s (60.0%)" && load.required == "≤ 50% of 100.0/s" && !load.met)
    }

    @Test func okForCountsFromTheStepAndBreaksOnANonOKLook() {
        // OK since long before this step: only the time at this step counts.
        let state = Self.at(1, since: Self.t0, okSince: Self.t0 - .hours(5))
        let d = Self.plan.decide(state, Self.good(5), now: Self.t0 + .minutes(20))
        guard case .wait(_, let gates) = d.action else { Issue.record("\(d.action)"); return }
        #expect(gates.first { $0.gate == "ok-for" }?.value == "OK for 20m")
        #expect(gates.first { $0.gate == "ok-for" }?.met == false)
        // A WATCH look (with "on watch wait") breaks the streak.
        let waiting = try! RampPlan.parse("name p\non watch wait\ngate ok-for 30m\nstep 5% hold 1h\nstep 10%")
        let broken = waiting.decide(Self.at(1, okSince: Self.t0), Self.good(5, level: .watch), now: Self.t0 + .hours(2))
        #expect(broken.state.okSince == nil)
        guard case .wait(let why, _) = broken.action else { Issue.record("\(broken.action)"); return }
        #expect(why == "WATCH: because")
        // OK again: the streak starts anew, so the step waits 30 minutes more.
        let again = waiting.decide(broken.state, Self.good(5), now: Self.t0 + .hours(2))
        #expect(again.state.okSince == Self.t0 + .hours(2))
        #expect({ if case .wait = again.action { true } else { false } }())
        let passed = waiting.decide(again.state, Self.good(5), now: Self.t0 + .hours(2) + .minutes(30))
        #expect(passed.action == .advance(step: 2, target: .init(percent: 10), reason: "plan 'p' step 2/2: 10%"))
    }

    @Test func verdictActions() {
        let state = Self.at(1, okSince: Self.t0)
        let now = Self.t0 + .hours(3)
        #expect(Self.plan.decide(state, Self.good(5, level: .halt), now: now).action == .kill("HALT: because"))
        #expect(
            Self.plan.decide(state, Self.good(5, level: .watch), now: now).action
                == .pause("WATCH: because", alert: true))
        // HOLD waits (default), and never advances even when every gate passes and the hold is over.
        let hold = Self.plan.decide(state, Self.good(5, level: .hold), now: Self.t0 + .hours(1))
        #expect(
            hold.action
                == .wait(
                    "HOLD: because",
                    gates: Self.plan.readings(
                        Self.plan.steps[0], Self.good(5, level: .hold), okSince: nil, now: Self.t0 + .hours(1))))
        let paused = try! RampPlan.parse("name p\non hold pause\non halt pause\nstep 5%\nstep 10%")
        #expect(
            paused.decide(state, Self.good(5, level: .hold), now: now).action == .pause("HOLD: because", alert: true))
        #expect(
            paused.decide(state, Self.good(5, level: .halt), now: now).action == .pause("HALT: because", alert: true))
    }

    @Test func aStepThatNeverPassesTimesOut() {
        var o = Self.good(5)
        o.exposedUsers = 10
        let state = Self.at(1, okSince: Self.t0)
        #expect(
            {
                if case .wait = Self.plan.decide(state, o, now: Self.t0 + .hours(3) - .seconds(Int64(1))).action {
                    true
                } else {
                    false
                }
            }())
        let d = Self.plan.decide(state, o, now: Self.t0 + .hours(3))
        #expect(d.action == .pause("timeout: step 1 (5%) has not passed its gates within 3h", alert: true))
        // HOLD that lasts past the timeout also pauses (the plan says wait on HOLD, but not forever).
        #expect(
            {
                if case .pause(let r, true) = Self.plan.decide(
                    state, Self.good(5, level: .hold), now: Self.t0 + .hours(4)
                ).action {
                    r.hasPrefix("timeout")
                } else {
                    false
                }
            }())
    }

    /// `step enforce` lines: after the last step's hold and gates, one service at a time; the last percentage
    /// step's rules (its exposure, the verdict's actions) go on judging them; done after the last enforcement.
    @Test func enforcementStepsComeAfterTheLastStepsHoldAndGates() throws {
        let plan = try RampPlan.parse(
            """
            name end
            gate users 100
            step 50% hold 1h
            step 100% hold 2h
            step enforce firestore.googleapis.com
            step enforce firebasestorage.googleapis.com
            """)
        let at100 = Self.at(2, okSince: Self.t0)
        guard case .wait(let why, _) = plan.decide(at100, Self.good(100), now: Self.t0 + .hours(1)).action else {
            Issue.record("the 100% step's hold must come first"); return
        }
        #expect(why.contains("holding 100%"))
        #expect(
            plan.decide(at100, Self.good(100), now: Self.t0 + .hours(2)).action
                == .enforce(
                    step: 3, service: "firestore.googleapis.com", reason: "plan 'end' step 3/4: enforce firestore.googleapis.com"))
        // Its gates too: too few users, no enforcement.
        var few = Self.good(100)
        few.exposedUsers = 10
        guard case .wait = plan.decide(at100, few, now: Self.t0 + .hours(3)).action else {
            Issue.record("an unmet gate must hold enforcement"); return
        }
        // The next enforcement at once (the hold was served), then done.
        let at3 = Self.at(3, okSince: Self.t0)
        #expect(
            plan.decide(at3, Self.good(100), now: Self.t0 + .hours(2)).action
                == .enforce(
                    step: 4, service: "firebasestorage.googleapis.com",
                    reason: "plan 'end' step 4/4: enforce firebasestorage.googleapis.com"))
        #expect(plan.decide(Self.at(4), Self.good(100), now: Self.t0 + .hours(2)).action == .done("all 4 steps published"))
        // The verdict's actions and outside changes still hold at an enforcement step.
        #expect(plan.decide(at3, Self.good(100, level: .halt), now: Self.t0 + .hours(2)).action == .kill("HALT: because"))
        #expect(
            plan.decide(at3, Self.good(60), now: Self.t0 + .hours(2)).action
                == .pause("the rollout is at 60%, not at step 2's 100%: changed outside the plan", alert: true))
        // The countdown reads the 100% step's hold.
        #expect(plan.countdown(at3, now: Self.t0 + .hours(1)).hold == .hours(1))
    }

    @Test func changesOutsideThePlanPauseIt() {
        let state = Self.at(2, okSince: Self.t0)
        #expect(
            Self.plan.decide(state, Self.good(30), now: Self.t0).action
                == .pause("the rollout is at 30%, not at step 2's 25%: changed outside the plan", alert: true))
        var killed = Self.good(25)
        killed.rollout = Self.rollout(25, killed: true)
        #expect(
            Self.plan.decide(state, killed, now: Self.t0).action
                == .pause("the rollout was killed outside the plan", alert: true))
    }

    /// A rollout killed before the plan's first step is not published over: the plan pauses for a person (or,
    /// on a HALT its plan kills on, ends killed), as it does at a later step.
    @Test func aKillBeforeTheFirstStepPausesThePlan() {
        var killed = Self.good(5)
        killed.rollout = Self.rollout(40, killed: true)
        #expect(
            Self.plan.decide(RampState(), killed, now: Self.t0).action
                == .pause("the rollout was killed outside the plan before its first step", alert: true))
        killed.level = .halt
        killed.reason = "because"
        var halting = Self.plan
        halting.actions.onHalt = .kill
        #expect(halting.decide(RampState(), killed, now: Self.t0).action == .kill("HALT: because"))
    }

    /// A plan paused by its timeout and resumed gets the step's timeout afresh from the resume; a resume during the
    /// hold leaves the hold as it was.
    @Test func aResumeGivesTheStepItsTimeoutAfresh() {
        var o = Self.good(5)
        o.exposedUsers = 10
        let state = Self.at(1, okSince: Self.t0)
        let paused = Self.plan.decide(state, o, now: Self.t0 + .hours(3))
        guard case .pause(let why, true) = paused.action, why.hasPrefix("timeout") else {
            Issue.record("not paused by the timeout: \(paused.action)")
            return
        }
        var stored = paused.state
        stored.phase = .paused
        let resumed = Self.plan.resumed(stored, now: Self.t0 + .hours(3) + .minutes(10))
        #expect(resumed.phase == .running && resumed.okSince == nil)
        #expect(resumed.reachedAt == Self.t0 + .hours(2) + .minutes(10))
        let next = Self.plan.decide(resumed, o, now: Self.t0 + .hours(3) + .minutes(11))
        #expect({ if case .wait = next.action { true } else { false } }())
        // Two hours (the plan's timeout) after the resume, the step times out again.
        let later = Self.plan.decide(resumed, o, now: Self.t0 + .hours(5) + .minutes(10))
        #expect({ if case .pause(let w, true) = later.action { w.hasPrefix("timeout") } else { false } }())
        // Resumed within the hold: the hold goes on from the publish.
        let early = Self.plan.resumed(Self.at(1, okSince: Self.t0), now: Self.t0 + .minutes(20))
        #expect(early.reachedAt == Self.t0)
    }

    /// The headless loop prints a plan line when `changeKey` changes: a countdown moving is not a change, a gate
    /// met or a new kind of wait is.
    @Test func aCountdownIsNotAChange() {
        let state = Self.at(1, okSince: Self.t0)
        let o = Self.good(5)
        let a = Self.plan.decide(state, o, now: Self.t0 + .minutes(10)).action
        let b = Self.plan.decide(state, o, now: Self.t0 + .minutes(11)).action
        #expect(a != b)
        #expect(a.changeKey == b.changeKey)
        var fewer = o
        fewer.exposedUsers = 10
        let held = Self.plan.decide(state, o, now: Self.t0 + .minutes(70)).action
        let gated = Self.plan.decide(state, fewer, now: Self.t0 + .minutes(70)).action
        #expect(held.changeKey != a.changeKey)
        #expect(gated.changeKey != held.changeKey)
    }

    @Test(arguments: [RampState.Phase.paused, .aborted, .killed, .done])
    func onlyARunningPlanActs(phase: RampState.Phase) {
        var state = Self.at(1, okSince: Self.t0)
        state.phase = phase
        let d = Self.plan.decide(state, Self.good(5), now: Self.t0 + .hours(5))
        #expect(d == RampDecision(action: .idle(phase), state: state))
        // HALT: a paused plan still kills (pausing stops advances, not the guard); a finished one does nothing.
        let halt = Self.plan.decide(state, Self.good(5, level: .halt), now: Self.t0 + .hours(5))
        #expect(halt.action == (phase == .paused ? .kill("HALT: because") : .idle(phase)))
        #expect(halt.state == state)
    }

    @Test func theDecisionIsAFunctionOfItsInputs() {
        let state = Self.at(1, okSince: Self.t0)
        let o = Self.good(5)
        #expect(
            Self.plan.decide(state, o, now: Self.t0 + .minutes(90))
                == Self.plan.decide(state, o, now: Self.t0 + .minutes(90)))
    }
}

struct RampRestartTests {
    @Test func aNextStepFoundPublishedIsAdoptedNotAnOutsideChange() {
        let plan = RampDecisionTests.plan
        let t0 = RampDecisionTests.t0
        // Stored: step 1 reached; the rollout is at step 2's 25% (published by a runner that then stopped).
        let d = plan.decide(RampDecisionTests.at(1, okSince: t0), RampDecisionTests.good(25), now: t0 + .hours(2))
        #expect(d.action == .wait("step 2 (25%) is published; holding it from now", gates: []))
        #expect(d.state.reached == 2 && d.state.reachedAt == t0 + .hours(2))
        // Nothing published yet, but step 1 is there: adopted too.
        let first = plan.decide(RampState(), RampDecisionTests.good(5), now: t0)
        #expect(first.state.reached == 1)
        // The adopted step holds from the adoption.
        let next = plan.decide(d.state, RampDecisionTests.good(25), now: t0 + .hours(2) + .minutes(59))
        #expect({ if case .wait(let why, _) = next.action { why.contains("holding 25%") } else { false } }())
    }

    @Test func aHaltOnAKilledRolloutIsThePlansKill() {
        var o = RampDecisionTests.good(25, level: .halt)
        o.rollout = RampDecisionTests.rollout(25, killed: true)
        #expect(
            RampDecisionTests.plan.decide(RampDecisionTests.at(2), o, now: RampDecisionTests.t0).action
                == .kill("HALT: because"))
    }
}

struct RampCountdownTests {
    /// The console's countdown: the hold and the ok-for streak left, on the clock and streak rule of `decide`.
    @Test func holdAndOkForLeftAtTheCurrentStep() {
        let plan = RampDecisionTests.plan
        let t0 = RampDecisionTests.t0
        // Step 1 published at t0, OK since before it: the streak counts from t0 (this step only).
        let state = RampState(reached: 1, reachedAt: t0, okSince: t0 - .hours(3))
        #expect(plan.countdown(state, now: t0 + .minutes(20)) == RampCountdown(hold: .minutes(40), okFor: .minutes(10)))
        // Past both: nothing left to count.
        #expect(plan.countdown(state, now: t0 + .minutes(61)) == RampCountdown())
        // Not OK at the last look: the whole ok-for is left; the hold still runs.
        var broken = state
        broken.okSince = nil
        #expect(
            plan.countdown(broken, now: t0 + .minutes(50)) == RampCountdown(hold: .minutes(10), okFor: .minutes(30)))
        // Nothing published yet: no countdown.
        #expect(plan.countdown(RampState(), now: t0) == RampCountdown())
        // The countdown agrees with decide: when both reach zero (and the gates pass), the plan advances.
        let d = plan.decide(state, RampDecisionTests.good(5), now: t0 + .minutes(60))
        #expect(d.action == .advance(step: 2, target: MicroPercent(percent: 25), reason: "plan 'ramp' step 2/3: 25%"))
    }
}
