import Rollout
import Timekeeping

extension PublishIntent {
    /// A pending Firebase publish of a nudge from version `base`, as the state-store tests write it.
    public static func sample(base: Int = 3, actor: String = "ana@test", at t0: Instant) -> PublishIntent {
        PublishIntent(
            created: t0, host: "host-a", pid: 4242, baseNumber: base, ifMatch: "etag-\(base)", contentDigest: "00ff",
            description: "nudge", rollbackSource: nil, origin: "ROLLOUT_CLI",
            audit: AuditEntry(
                time: t0, actor: actor, action: "nudge +1", from: "3%", to: "4%", reason: "ramp", result: .published))
    }
}
