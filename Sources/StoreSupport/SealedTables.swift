/// The tables that decide a write, which the seal of either store digests whole (`StoreSeal` on the SQLite file,
/// `PostgresSeal` on the team store): one list, so that the two backends cannot drift apart (the SQLite seal once
/// left the Firebase state, the publish intents and the configured sources out, which the PostgreSQL one sealed).
///
/// Each backend seals those of them its schema has (`sealed(without:)`: the SQLite file keeps no key check, its seal's
/// HMAC is the check; the team store keeps a key's retirement in `appcheck_signing_keys`). A table a store has not
/// created yet is sealed as absent. Telemetry (events, counters, installations) and the exchange's per-request state
/// are not here: they are forgeable by design (the events intake accepts any client's batches) or grow with the
/// traffic (their tally is sealed instead).
public enum SealedTables {
    /// Every table, sorted.
    ///
    /// Step-up (operators, pending enrolments, the policy, security keys, phones), the guardrail settings, the key
    /// check, the App Check configuration (project, apps, signing keys and their retirements, debug tokens, the demo
    /// authority), the ramp plan and its pre-approval, a Firebase project's state store (the project it is bound to,
    /// the publish intents: a forged intent would be settled into an audit record naming its actor), the configured
    /// telemetry sources (a forged source would feed the verdict), the monitor's cache of when the rollout started (a
    /// forged start in the future made every window empty: HOLD instead of auto-kill) and the simulation's clock (a
    /// forged heartbeat moved telemetry time hours ahead: a plan's holds passed at once and stale data read as fresh).
    public static let all: [String] = [
        "appcheck_apps", "appcheck_debug_tokens", "appcheck_demo_authority", "appcheck_project",
        "appcheck_signing_key_retirements", "appcheck_signing_keys", "firebase_intents", "firebase_state",
        "guardrail_settings", "monitor_rollout_start", "ramp_plan", "ramp_plan_approval", "simulation_clock",
        "source_config", "stepup_enrolments", "stepup_operators", "stepup_phones", "stepup_policy",
        "stepup_security_keys", "store_key_check",
    ]

    /// `all` without the tables a backend's schema never has (each named by that backend with its reason).
    public static func sealed(without missing: Set<String>) -> [String] {
        precondition(missing.isSubset(of: all), "internal: not a sealed table: \(missing.subtracting(all))")
        return all.filter { !missing.contains($0) }
    }
}
