import Rollout

/// Port: where a store keeps the step-up policy (`rollout policy set increase-over ...`; the `stepup_policy`
/// table of the SQLite store). `enforcement()` of `StepUpStore` reads it for the gate; this is the write side.
///
/// Rules (checked by `SettingsConformance`): a store that never saved a policy reads the defaults and creates
/// nothing; `saveStepUpPolicy` stores every setting of the policy, so the next read equals it; callers go through
/// the settings write path, which judges and audits the change in the same transaction (`ConfigStore.atomically`);
/// a read-only store refuses the write.
public protocol StepUpPolicyStore: AnyObject {
    func stepUpPolicy() throws -> StepUpPolicy
    func saveStepUpPolicy(_ policy: StepUpPolicy) throws
}
