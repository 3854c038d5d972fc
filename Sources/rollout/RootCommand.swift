import CommandLineKit
import Platform
import RolloutApp
import Telemetry

/// The command tree. Each area of the product contributes its commands from its own file.
enum RootCommand {
    /// What `rollout --version` prints.
    static let version = "rollout 0.2.0"

    static let globalOptions: [Option] = [
        .value("--store", name: "PATH", help: "The store file (else $ROLLOUT_STORE, else $XDG_STATE_HOME/rollout/rollout.db)."),
        .value("--operator", name: "ID", help: "Who is acting (else $ROLLOUT_OPERATOR, else user@host)."),
        .flag("--read-only", help: "Refuse every write (enforced in the write path)."),
    ] + FirebaseWiring.options

    /// The verdict words, comma-separated (`joinedText`: built for every command).
    static var verdictWords: String { VerdictLevel.allCases.map(\.labelText).joinedText(", ") }

    static func make() -> Command {
        Command(
            "rollout",
            summary: "Roll out Firebase App Check with App Attest a percentage at a time, safely.",
            discussion: "A console and CLI for the on-call engineer: watch attestation and crash health, nudge the "
                + "AppAttestEnabled percentage with compare-and-swap, kill, roll back, audit. "
                + "Verdicts: " + verdictWords
                + " (the same words and symbols as the console). "
                + "Exit codes: 0 ok, 1 failure, 2 usage (including any invalid percentage), 3 conflict, 4 refused by "
                + "policy, guardrail or read-only; status --check and watch: 0 OK, 5 WATCH, 6 HOLD, 7 HALT.",
            options: globalOptions,
            examples: [
                "rollout demo                       # the console on a temporary store with a simulated fleet",
                "rollout status --json",
                "rollout help nudge                 # the same as 'rollout nudge --help'",
                "rollout --version",
                "rollout nudge +5 --reason \"crash rate flat for 24h\"",
            ],
            subcommands: EvaluateCommands.all + StoreCommands.all + TelemetryCommands.all + SimulateCommands.all
                + SourceCommands.all + ConsoleCommands.all + AttestCommands.all + OperatorCommands.all + ServeCommands.all + PlanCommands.all + EnforcementCommands.all + TeamStoreCommands.all
        )
    }
}
