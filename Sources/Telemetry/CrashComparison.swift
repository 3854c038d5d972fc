import Glibc
import Timekeeping

/// Settings of the crash comparison between exposed and control.
public struct CrashMonitorConfiguration: Hashable, Sendable {
    /// The crash-rate ratio the SPRT is built to detect (r).
    public var harmRatio: Double
    /// False-alarm level α of the SPRT and of the confidence sequences.
    public var alpha: Double
    /// Miss rate β of the SPRT (power 1 − β); also the power used for the detectable effect.
    public var beta: Double
    /// The mixture's spread as a share of the pooled rate: τ = this × pooled crash rate.
    public var mixingRelativeEffect: Double

    public init(harmRatio: Double = 1.5, alpha: Double = 0.05, beta: Double = 0.1, mixingRelativeEffect: Double = 0.5) {
        self.harmRatio = harmRatio
        self.alpha = alpha
        self.beta = beta
        self.mixingRelativeEffect = mixingRelativeEffect
    }
}

/// One look's worth of what the crash comparison reads (fatal crashes only).
public struct CrashLook: Hashable, Sendable {
    public var exposedSessions: Int64 = 0
    public var controlSessions: Int64 = 0
    public var exposedCrashes: Int64 = 0
    public var controlCrashes: Int64 = 0
    /// Installations that reported the cohort for the first time during the look.
    public var exposedUsers: Int64 = 0
    public var controlUsers: Int64 = 0
    /// Installations whose first fatal crash in the cohort fell in the look.
    public var exposedCrashedUsers: Int64 = 0
    public var controlCrashedUsers: Int64 = 0

    public init(
        exposedSessions: Int64 = 0, controlSessions: Int64 = 0, exposedCrashes: Int64 = 0, controlCrashes: Int64 = 0,
        exposedUsers: Int64 = 0, controlUsers: Int64 = 0, exposedCrashedUsers: Int64 = 0, controlCrashedUsers: Int64 = 0
    ) {
        self.exposedSessions = exposedSessions
        self.controlSessions = controlSessions
        self.exposedCrashes = exposedCrashes
        self.controlCrashes = controlCrashes
        self.exposedUsers = exposedUsers
        self.controlUsers = controlUsers
        self.exposedCrashedUsers = exposedCrashedUsers
        self.controlCrashedUsers = controlCrashedUsers
    }

    /// The crash figures among a look's counters.
    public init(_ counts: [CounterKey: Int64]) {
        for (key, n) in counts {
            let exposed = key.cohort == .enabled
            guard exposed || key.cohort == .control else { continue }
            switch key.kind {
            case .session: if exposed { exposedSessions += n } else { controlSessions += n }
            case .crash where key.detail == 1: if exposed { exposedCrashes += n } else { controlCrashes += n }
            case .usersEntered: if exposed { exposedUsers += n } else { controlUsers += n }
            case .usersCrashed: if exposed { exposedCrashedUsers += n } else { controlCrashedUsers += n }
            default: break
            }
        }
    }

    public static func += (a: inout CrashLook, b: CrashLook) {
        a.exposedSessions += b.exposedSessions
        a.controlSessions += b.controlSessions
        a.exposedCrashes += b.exposedCrashes
        a.controlCrashes += b.controlCrashes
        a.exposedUsers += b.exposedUsers
        a.controlUsers += b.controlUsers
        a.exposedCrashedUsers += b.exposedCrashedUsers
        a.controlCrashedUsers += b.controlCrashedUsers
    }

    /// Fatal crashes per session, exposed and control (nil without sessions).
    public var exposedCrashRate: Double? {
        exposedSessions > 0 ? min(1, Double(exposedCrashes) / Double(exposedSessions)) : nil
    }
    public var controlCrashRate: Double? {
        controlSessions > 0 ? min(1, Double(controlCrashes) / Double(controlSessions)) : nil
    }
    /// Share of users with a fatal crash, exposed and control (nil without users).
    public var exposedCrashedUserRate: Double? {
        exposedUsers > 0 ? min(1, Double(exposedCrashedUsers) / Double(exposedUsers)) : nil
    }
    public var controlCrashedUserRate: Double? {
        controlUsers > 0 ? min(1, Double(controlCrashedUsers) / Double(controlUsers)) : nil
    }
}

/// Exposed vs control crash statistics, updated look by look so that they stay valid however often they are
/// read: the allocation-robust SPRT, and always-valid intervals for the differences in crash rate per session
/// and per user.
public struct CrashComparison: Hashable, Sendable {
    public let configuration: CrashMonitorConfiguration
    public internal(set) var sprt: CrashSPRT
    /// θ = exposed − control fatal crashes per session (crash-free sessions are 1 − rate).
    public internal(set) var sessionDifference: MixtureSPRT
    /// θ = exposed − control share of users with a fatal crash (crash-free users are 1 − share).
    public internal(set) var userDifference: MixtureSPRT
    /// Everything observed so far.
    public internal(set) var totals = CrashLook()
    public internal(set) var looks = 0
    /// The exposed share of sessions used for the latest look's crashes (π0).
    public internal(set) var exposedShare: Double?
    /// The test against the control's rate before it left, frozen at the first look with exposed sessions and no
    /// control sessions (at 100%), once the control had `minimumBaselineCrashes`; nil before. It weighs every such
    /// look from then on, and none with control sessions: one test for the whole rollout, never started again, so
    /// its false-alarm level holds however often the control leaves and returns, and a harm it declared stays.
    public internal(set) var baseline: BaselineCrashTest?
    /// The end of the first look with exposed sessions and none in control since control sessions were last seen;
    /// nil while control sessions come in (and before any came). A look without sessions in either arm changes
    /// nothing: it says nothing about where the control group is.
    ///
    /// At 100% the control group is gone and the comparison against its rate before it left is what remains; but
    /// a kill's last exposed stragglers, or a quiet minute of a small control group, leave looks without control
    /// sessions too, and the control group is back with its next session.
    public internal(set) var controlGoneSince: Instant?

    /// Fewer control crashes than this make no baseline (its bound would be too wide to test anything).
    public static let minimumBaselineCrashes: Int64 = 20

    /// Whether either test has declared harm (both stay declared).
    public var harmDeclared: Bool { sprt.harmDeclared || (baseline?.harmDeclared ?? false) }

    public init(configuration: CrashMonitorConfiguration = CrashMonitorConfiguration()) {
        self.configuration = configuration
        sprt = CrashSPRT(harmRatio: configuration.harmRatio, alpha: configuration.alpha, beta: configuration.beta)
        sessionDifference = MixtureSPRT(alpha: configuration.alpha)
        userDifference = MixtureSPRT(alpha: configuration.alpha)
    }

    /// Adds one look that ended at `end`.
    public mutating func observe(_ look: CrashLook, at end: Instant) {
        looks += 1
        let before = totals
        totals += look
        if look.controlSessions > 0 {
            controlGoneSince = nil
        } else if look.exposedSessions > 0, before.controlSessions > 0, controlGoneSince == nil {
            controlGoneSince = end
        }
        // π0 from the look's own sessions. A look with exposed sessions and none in control says nothing about the
        // allocation (every crash is exposed at π0 = 1; borrowing an earlier share made each one look like harm, a
        // false HALT at 100%): its crashes go to the baseline test instead. A look with control sessions only says
        // nothing either. A look without sessions at all (crashes from another source) borrows the cumulative share.
        var share: Double?
        if look.exposedSessions > 0, look.controlSessions > 0 {
            share = Double(look.exposedSessions) / Double(look.exposedSessions + look.controlSessions)
        } else if look.exposedSessions > 0 {
            if baseline == nil, before.controlCrashes >= Self.minimumBaselineCrashes {
                baseline = BaselineCrashTest(
                    harmRatio: configuration.harmRatio, alpha: configuration.alpha, crashes: before.controlCrashes,
                    sessions: before.controlSessions, at: end)
            }
            baseline?.observe(sessions: look.exposedSessions, crashes: look.exposedCrashes, at: end)
        } else if look.controlSessions == 0, totals.exposedSessions > 0, totals.controlSessions > 0 {
            share = Double(totals.exposedSessions) / Double(totals.exposedSessions + totals.controlSessions)
        }
        if let share {
            exposedShare = share
            sprt.observe(
                exposedCrashes: look.exposedCrashes, controlCrashes: look.controlCrashes, exposedShare: share, at: end)
        }
        // The two differences compare the arms' totals, which are alike only while both arms are observed together.
        // A look with exposed sessions and no control sessions (at 100%, the control gone) keeps adding exposed
        // sessions and first crashes while the control's totals stand still: every exposed user's window grows and
        // no control user's does, so crashed-user shares drift apart in a healthy fleet (a false WATCH). Such a look
        // leaves them as they were after the last look with both arms; the baseline test above judges it instead.
        // The totals keep the look, so a later look with both arms compares everything again.
        guard !(look.exposedSessions > 0 && look.controlSessions == 0) else { return }
        Self.update(
            &sessionDifference, events: (totals.exposedCrashes, totals.controlCrashes),
            trials: (totals.exposedSessions, totals.controlSessions), relative: configuration.mixingRelativeEffect)
        Self.update(
            &userDifference, events: (totals.exposedCrashedUsers, totals.controlCrashedUsers),
            trials: (totals.exposedUsers, totals.controlUsers), relative: configuration.mixingRelativeEffect)
    }

    private static func update(
        _ test: inout MixtureSPRT, events: (Int64, Int64), trials: (Int64, Int64), relative: Double
    ) {
        guard trials.0 > 0, trials.1 > 0 else { return }
        let pe = min(1, Double(events.0) / Double(trials.0))
        let pc = min(1, Double(events.1) / Double(trials.1))
        let v = pe * (1 - pe) / Double(trials.0) + pc * (1 - pc) / Double(trials.1)
        let pooled = min(1, Double(events.0 + events.1) / Double(trials.0 + trials.1))
        let tau = relative * pooled
        // A difference of two rates lies within −1 and 1.
        test.observe(estimate: pe - pc, variance: v, mixingVariance: tau * tau, possible: -1...1)
    }

    /// The smallest relative increase in crashed users detectable with the smaller arm's users so far, at the
    /// control group's rate (nil before the control group has a crash).
    public var smallestDetectableIncrease: Double? {
        guard let p0 = totals.controlCrashedUserRate, p0 > 0 else { return nil }
        return DetectableEffect.smallestRelativeIncrease(
            usersPerArm: Double(min(totals.exposedUsers, totals.controlUsers)), baseline: p0,
            alpha: configuration.alpha, power: 1 - configuration.beta)
    }
}
