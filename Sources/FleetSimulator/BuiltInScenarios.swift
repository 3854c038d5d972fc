/// The shipped scenarios, compiled in: `Sources/FleetSimulator/Scenarios/*.scenario` are their readable copies, and
/// a test holds the two equal byte for byte. Compiled in, they need no resource bundle next to the program (whose
/// generated accessor would link corelibs Foundation) and cannot go missing from an installation.
extension Scenario {
    /// The names of the shipped scenarios, sorted.
    public static let builtInNames: [String] = builtInSources.map(\.name)

    /// The text of a shipped scenario, or nil.
    public static func builtInSource(_ name: String) -> String? { builtInSources.first { $0.name == name }?.text }

    static let builtInSources: [(name: String, text: String)] = [
        (
            "bad-build",
            #"""
            # Not the rollout's fault: app build 3.2.0 crashes more for everybody, exposed or not, and was signed by
            # the wrong team, so the App Check exchange rejects every attestation it makes (rpIdHashMismatch).
            summary  A bad app build: 3.2.0 crashes more for everybody and its attestations are rejected (wrong team).
            duration 2h
            devices  20000

            sessions-per-day 24
            session-length   4m
            crash-rate       0.5%

            rollout 10%
            at 15m release 3.2.0 adoption 60%/h crash-rate 1.5% app-id WRONGTEAM1.dev.rollout.fleet

            """#
        ),
        (
            "busy",
            #"""
            # The default of `rollout demo`: a healthy rollout on a busy app whose crash comparison gets the power the
            # guardrail asks for (crash.detectable-effect-percent, default 50) within about an hour of simulated time, so at the
            # demo's 600x the verdict reaches OK in well under a minute and the whole loop (watch, nudge, confirm, propagate)
            # can be shown. Crashes are frequent (2% of sessions) and 40% of the fleet is exposed, so the comparison
            # has crashes to count early; the verdict's power floor is the same as for any store.
            summary  The default demo: a healthy rollout at 40% of a busy, crash-prone app; OK after about an hour.
            duration 8h
            devices  20000
            demo-speed 600x

            sessions-per-day 24
            session-length   4m
            crash-rate       2%

            rollout 40%

            """#
        ),
        (
            "crash-regression",
            #"""
            # A fatal bug on App Attest's code path: devices that run App Attest crash more than the control group.
            # The guardrail must call HALT; the same fleet without the bug (steady) must not.
            summary  Exposed users crash more: a fatal bug on App Attest's code path, the regression a rollout must catch.
            duration 2h
            devices  20000

            sessions-per-day   24
            session-length     4m
            crash-rate         0.5%
            exposed-crash-rate 2%

            rollout 20%

            """#
        ),
        (
            "slow-propagation",
            #"""
            # Remote Config's default 12-hour fetch interval and no real-time listeners: a change reaches devices only
            # as their cached config expires, over hours. Observed exposure lags the desired percentage.
            summary  Slow propagation: a 12-hour fetch interval and no real-time updates; a nudge takes hours to land.
            duration 4h
            devices  20000

            fetch-interval 12h
            realtime       0%

            rollout 5%
            at 1h rollout 10%

            """#
        ),
        (
            "steady",
            #"""
            # A healthy rollout held at 10%: background failures and crashes, nothing else going wrong.
            # A busy app (many short sessions), so that the crash comparison has data within the run.
            summary  A healthy rollout held at 10%: background failures and the usual crashes only.
            duration 2h
            devices  20000

            sessions-per-day 24
            session-length   4m
            crash-rate       0.5%

            rollout 10%

            """#
        ),
        (
            "throttling",
            #"""
            # A big nudge: many devices are in a session with real-time updates on, all of them get the new config within
            # seconds and attest at once, more than Apple's service takes. Throttled devices get serverUnavailable, back off
            # (30 s, doubling), retry, and the throttling clears once the wave has passed: launches alone stay below the
            # capacity.
            summary  Apple throttles: a nudge to 50% exceeds the attestation capacity; devices back off and it clears.
            duration 1h30m
            devices  20000

            sessions-per-day 12
            session-length   8m
            realtime         80%
            apple-capacity   3/s
            attest-failure.serverUnavailable 0.2%

            rollout 5%
            at 30m rollout 50%

            """#
        ),
    ]
}
