import RemoteConfig
import Rollout

/// What the fleet fetches: the newest version in a config store, compiled once per version.
///
/// Devices fetch from the store itself, so that a change an operator publishes from another terminal reaches
/// them. Checking costs one small query for the newest version number (at most once per simulated second,
/// which is all a fetch needs to see); the template is read and compiled only when that number changes.
final class FleetConfigView {
    let store: any ConfigStore
    let names: RolloutNames
    private(set) var version = 0
    private var evaluator: TemplateEvaluator?
    private var checkedSecond = Int64.min
    private let keys: [String]

    init(store: any ConfigStore, names: RolloutNames) {
        self.store = store
        self.names = names
        keys = [names.parameter, names.cohortParameter]
    }

    /// The newest version number as of simulated time `micros`.
    func newest(at micros: Int64) throws -> Int {
        let second = micros / 1_000_000
        guard second != checkedSecond else { return version }
        checkedSecond = second
        let number = try store.versions(limit: 1, before: nil).first?.number ?? 0
        if number != version || evaluator == nil {
            let stored = try store.current()
            version = stored.info.number
            evaluator = TemplateEvaluator(stored.template)
        }
        return version
    }

    /// Forgets the last check, so that the next fetch sees a version just published.
    func invalidate() { checkedSecond = .min }

    /// The flag and cohort an installation gets from the newest version fetched (`newest(at:)` first).
    ///
    /// As the app reads them: the flag is on only for the string `"true"`; a missing or unknown cohort is `none`.
    func values(for installationID: String) -> (flag: Bool, cohort: Cohort) {
        guard let evaluator else { return (false, .none) }
        let v = evaluator.values(of: keys, for: EvaluationContext(randomizationId: installationID))
        let flag = v[0].source == .remote && v[0].value == "true"
        let cohort = v[1].source == .remote ? Cohort(rawValue: v[1].value ?? "") ?? .none : .none
        return (flag, cohort)
    }
}
