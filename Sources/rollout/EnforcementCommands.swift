import CommandLineKit
import JSON
import Platform
import Rollout
import RolloutApp

/// `rollout enforcement`: App Check enforcement of a Firebase project's services, the ramp's last stage.
enum EnforcementCommands {
    static let all: [Command] = [group]

    static let group = Command(
        "enforcement",
        summary: "App Check enforcement of the project's services (Firestore, Realtime Database, Storage, Auth).",
        discussion: "The ramp's last stage, on --store firebase:PROJECT (the App Check API, projects.services; "
            + "FIREBASE_APPCHECK_URL overrides its address). An ENFORCED service rejects every request without a valid "
            + "App Check token, so ENFORCED is refused until the rollout is at 100% with an OK verdict for "
            + "enforcement.ok-for-minutes (policy set; default one day). A kill, or any change that lowers exposure, "
            + "first sets every ENFORCED service UNENFORCED (the write path's App Check enforcement policy, whatever "
            + "asks: CLI, console, auto-kill, plan). Changes take up to 15 minutes to take effect in Firebase.",
        examples: [
            "rollout enforcement show",
            "rollout enforcement set firestore.googleapis.com unenforced --reason \"watch the metrics first\"",
            "rollout enforcement set firestore.googleapis.com enforced --reason \"100% for a week\" --dry-run",
        ],
        subcommands: [show, set])

    static let show = Command(
        "show",
        summary: "Each service's enforcement mode as Firebase has it now.",
        options: [.flag("--json", help: "Print a JSON array.")],
        examples: ["rollout enforcement show --json"],
        action: StoreCommands.guarded { inv in
            let services = try Wiring.session(inv).enforcement().services(settled: { line in
                StandardStream.error.write("settled: \(line)\n")
            })
            if inv.flag("--json") {
                let items: [JSONValue] = services.map { s in
                    var o = JSONObject()
                    o["service"] = .string(s.id)
                    o["enforcementMode"] = .string(s.enforcementMode.rawValue)
                    if let r = s.replayProtection { o["replayProtection"] = .string(r) }
                    if let t = s.updateTime { o["updateTime"] = .string(t) }
                    return .object(o)
                }
                print(JSONWriter().string(.array(items)))
            } else {
                StoreCommands.printRows(
                    services.map { s in
                        (s.id, s.enforcementMode.rawValue + (s.updateTime.map { "  (changed \($0))" } ?? ""))
                    })
            }
            return .ok
        })

    static let set = Command(
        "set",
        summary: "Set one service's enforcement: off, unenforced (metrics only) or enforced.",
        options: [
            .value("--reason", name: "TEXT", help: "Why (recorded in the audit log); required."),
            .value("--code", name: "CODE", help: "A fresh one-time code, when the step-up policy asks (policy key appcheck)."),
            .flag("--dry-run", help: "Check everything and say what would be done; send and record nothing."),
        ],
        positionals: [
            Positional("SERVICE", help: "The service id, such as firestore.googleapis.com."),
            Positional("MODE", help: "off, unenforced or enforced."),
        ],
        examples: ["rollout enforcement set firebasestorage.googleapis.com enforced --reason \"ramp done\""],
        action: StoreCommands.guarded { inv in
            let service = inv.positional(0)!
            guard let mode = EnforcementMode(argument: inv.positional(1)!) else {
                throw inv.usageError("MODE is off, unenforced or enforced, not '\(inv.positional(1)!)'")
            }
            let reason = try StoreCommands.reason(inv)
            guard !reason.isEmpty else { throw inv.usageError("--reason is required for an enforcement change") }
            do {
                switch try Wiring.session(inv).enforcement().set(
                    service, mode, reason: reason, code: inv.value("--code"), dryRun: inv.flag("--dry-run"))
                {
                case .unchanged(let s, let settled):
                    for line in settled { print("settled: \(line)") }
                    print("\(s.id) is \(s.enforcementMode.rawValue) already; nothing sent")
                case .wouldChange(let s, let to, let rollout):
                    print("would set \(s.id) \(s.enforcementMode.rawValue) → \(to.rawValue) (dry run: nothing sent)")
                    if let r = rollout.wouldReject {
                        print(
                            "  requests that would be rejected once enforced: about \((r * 1000).rounded() / 10)% "
                                + "(outdated clients and failed attestations in the last window)")
                    }
                case .changed(let before, let after):
                    print(
                        "\(after.id): \(before.enforcementMode.rawValue) → \(after.enforcementMode.rawValue) "
                            + "(Firebase takes up to 15 minutes to apply it)")
                }
            } catch let r as EnforcementPath.Refusal {
                throw CommandError(r.description, exit: .refused)
            } catch let f as SettingsWritePath.Failure {
                if case .refused(_, let needsCode) = f {
                    throw CommandError(f.description + (needsCode ? " (pass --code CODE)" : ""), exit: .refused)
                }
                throw CommandError(f.description)
            }
            return .ok
        })
}
