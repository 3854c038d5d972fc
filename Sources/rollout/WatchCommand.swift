import CommandLineKit
import Foundation
import JSON
import Rollout
import RolloutApp
import Store
import Telemetry
import Timekeeping

/// `rollout watch`: the console's verdict without a screen, for a terminal, a pipe or a service.
extension TelemetryCommands {
    static let watch = Command(
        "watch",
        summary: "Follow the store headless: print each verdict change, run auto-kill, exit with the verdict.",
        discussion: "Looks at the store every --interval seconds of wall time and computes the one assessment (the same "
            + "as 'rollout status', the console and the guardrail policy). Prints a line whenever the level or the "
            + "reason changes (text, or one JSON object per line with --json). With guardrails.auto-kill on and a "
            + "writable store, a HALT while anyone is exposed publishes a kill through the write path, audited as "
            + "the guardrail; any number of watchers and consoles may run at once: the kill is a compare-and-swap, "
            + "so exactly one is published. Runs until interrupted (SIGINT, SIGTERM), --looks are done, or, with "
            + "--exit-on-halt, the first HALT. Exit code: the last verdict, 0 OK, 5 WATCH, 6 HOLD, 7 HALT. "
            + GuardrailSettings.staleDefinition + ".",
        options: [
            .value("--interval", name: "SECONDS", help: "Wall seconds between looks (default 2; 0.1 to 3600)."),
            .value("--looks", name: "N", help: "Stop after N looks."),
            .flag("--exit-on-halt", help: "Exit (code 7) at the first HALT, after auto-kill had its chance."),
            .flag("--json", help: "Print one JSON object per verdict change."),
        ],
        examples: [
            "rollout watch",
            "rollout watch --json --exit-on-halt | tee verdicts.ndjson",
            "rollout watch --read-only --looks 1   # one look, exit code = verdict",
        ],
        action: runWatch)

    static func runWatch(_ invocation: Invocation) throws -> ExitCode {
        var interval = 2.0
        if let text = invocation.value("--interval") {
            guard let v = Double(text), v.isFinite, v >= 0.1, v <= 3600 else {
                throw invocation.usageError("--interval takes seconds from 0.1 to 3600, not '\(text)'")
            }
            interval = v
        }
        let looks = try invocation.value("--looks").map { text -> Int in
            guard let n = Int(text), n > 0 else { throw invocation.usageError("--looks takes a positive whole number") }
            return n
        }
        let json = invocation.flag("--json")
        let exitOnHalt = invocation.flag("--exit-on-halt")
        let session = try Wiring.session(invocation)
        let monitor = try session.monitor()
        let path = session.readOnly ? nil : try session.writePath()
        let stop = StopFlag()
        let signals = [SIGINT, SIGTERM].map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { stop.set() }
            source.resume()
            return source
        }
        defer { signals.forEach { $0.cancel() } }

        var last: (VerdictLevel, String)?
        var level = VerdictLevel.hold
        var done = 0
        while !stop.isSet {
            let status = try monitor.status()
            level = status.assessment.verdict.level
            var killed: String?
            if let path, case .published(let stored, let proposal, _)? = try monitor.autoKillIfHalted(status, using: path) {
                killed = "auto-kill: \(proposal.summary) (version \(stored.info.number))"
            }
            let now = (status.assessment.verdict.level, status.assessment.verdict.reason)
            if last.map({ $0 != now }) ?? true || killed != nil {
                if json {
                    var o = AssessmentJSON.value(status).objectValue ?? JSONObject()
                    o["version"] = .number(JSONNumber(Int64(status.current.info.number)))
                    o["autoKill"] = killed.map { .string($0) } ?? .null
                    print(JSONWriter().string(.object(o)))
                } else {
                    print("\(status.wallNow.iso8601)  \(status.assessment.verdict.level.labelText): \(status.assessment.verdict.reason)")
                    if let killed { print("\(status.wallNow.iso8601)  \(killed)") }
                }
                fflush(nil)
                last = now
            }
            done += 1
            if exitOnHalt, level == .halt { break }
            if let looks, done >= looks { break }
            stop.wait(seconds: interval)
        }
        return AssessmentJSON.exitCode(level)
    }

    /// Set from a signal handler's queue, waited on by the loop.
    final class StopFlag: @unchecked Sendable {
        private let condition = NSCondition()
        private var stopped = false
        func set() {
            condition.lock()
            stopped = true
            condition.broadcast()
            condition.unlock()
        }
        var isSet: Bool {
            condition.lock()
            defer { condition.unlock() }
            return stopped
        }
        func wait(seconds: Double) {
            condition.lock()
            if !stopped { _ = condition.wait(until: Date(timeIntervalSinceNow: seconds)) }
            condition.unlock()
        }
    }
}
