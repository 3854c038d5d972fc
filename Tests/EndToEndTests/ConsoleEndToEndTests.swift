import Foundation
import Testing
import TestSupport

/// The built `rollout console` in a real terminal (tmux on a private socket), against a real store.
@Suite("rollout console in a real terminal", .serialized)
struct ConsoleEndToEndTests {
    final class Fixture {
        let directory: URL
        let store: String
        let binary: String

        /// `initialized: false` leaves the path free for a command that makes its own drill store (`simulate`).
        init(initialized: Bool = true) throws {
            directory = try TestSupport.temporaryDirectory("console-e2e")
            store = directory.appendingPathComponent("rollout.db").path
            binary = try TestSupport.rolloutBinary()
            guard initialized else { return }
            // Only init creates a store; made an hour ago so that every later version is newer.
            let created = try TestSupport.run(
                binary, ["init", "--store", store, "--operator", "bob@example.com"], fakeTime: "-60m")
            guard created.status == 0 else { throw TestSupport.Failure("init failed: \(created.stderr)") }
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        @discardableResult
        func cli(_ arguments: String..., stdin: String? = nil, operatorID: String = "bob@example.com") throws -> TestSupport.ProcessResult {
            try TestSupport.run(binary, arguments + ["--store", store, "--operator", operatorID], stdin: stdin)
        }

        /// A command run as if `minutes` ago (libfaketime), to start a rollout before the telemetry that follows.
        @discardableResult
        func cli(minutesAgo minutes: Int, _ arguments: String...) throws -> TestSupport.ProcessResult {
            try TestSupport.run(
                binary, arguments + ["--store", store, "--operator", "bob@example.com"], fakeTime: "-\(minutes)m")
        }

        /// Fresh telemetry: sessions and attestation successes in both groups, a few failures.
        func ingestTelemetry() throws {
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            var lines: [String] = []
            for i in 0..<40 {
                let t = now - Int64(i) * 3_000_000
                lines.append(#"{"t":\#(t),"i":"e\#(i)","k":"session","c":"enabled","p":"appAttest","os":"17.4"}"#)
                lines.append(#"{"t":\#(t),"i":"c\#(i)","k":"session","c":"control","p":"appAttest","os":"17.4"}"#)
                lines.append(#"{"t":\#(t + 1),"i":"e\#(i)","k":"success","c":"enabled","p":"appAttest"}"#)
            }
            for i in 0..<3 { lines.append(#"{"t":\#(now - Int64(i)),"i":"e\#(i)","k":"failure","e":"serverUnavailable","c":"enabled"}"#) }
            let r = try cli("ingest", "-", stdin: lines.joined(separator: "\n") + "\n")
            try #require(r.status == 0, "\(r.stderr)")
        }

        /// The console under a shell that reports whether the terminal settings were restored. (Under the test
        /// harness's tmux the first line printed after the console leaves the alternate screen is not kept, hence
        /// the empty `echo`.)
        func console(_ extra: [String] = [], width: Int = 100, height: Int = 30, environment: [String: String?] = [:]) throws -> TerminalSession {
            let command = ([binary, "console", "--store", store, "--operator", "ana@example.com"] + extra).map(TerminalSession.quote)
                .joined(separator: " ")
            let script = "trap : INT; before=$(stty -g); \(command); rc=$?; echo; [ \"$before\" = \"$(stty -g)\" ] && echo TERMINAL-RESTORED; exit $rc"
            return try TerminalSession(["sh", "-c", script], width: width, height: height, environment: environment)
        }

        func statusJSON() throws -> String { try cli("status", "--json").stdout }
    }

    /// With telemetry but no crash comparison yet the verdict is HOLD: the console shows the counts, the
    /// guardrail refuses an increase in its own words, and a decrease goes through.
    @Test func showsTheCountsAndTheGuardrailRefusesAnIncreaseOnHold() throws {
        let f = try Fixture()
        try #require(f.cli(minutesAgo: 10, "set", "10", "--reason", "start").status == 0)
        try f.ingestTelemetry()
        let session = try f.console()
        defer { session.close() }
        let screen = try session.waitFor("40 success")
        #expect(screen.contains("<= 10") && screen.contains("3 failure") && screen.contains("serverUnavailable"))
        #expect(screen.contains("HOLD") && screen.contains("armed"))

        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        // The dialog already says the guardrail refuses it: no reason is asked for; the refusal is the notice.
        try session.press("Tab", "Enter")
        let refused = try session.waitFor("Refused by guardrail")
        #expect(!refused.contains("Reason for the increase") && !refused.contains("Refused: refused"), "\(refused)")
        #expect(try f.statusJSON().contains("\"microPercent\": 10000000"))

        try session.press("-")
        try session.waitFor("Confirm: nudge -1 point")
        try session.press("Tab", "Enter")
        try session.waitFor("<= 9")
        #expect(try f.statusJSON().contains("\"microPercent\": 9000000"))
        try session.press("q")
        #expect(try session.exitStatus() == 0)
        try session.waitFor("TERMINAL-RESTORED")
    }

    /// Without telemetry the guardrails are not armed: an increase goes through the confirm dialog (Cancel first)
    /// and the reason prompt, and lands in the store as a version from the console.
    @Test func nudgesThroughTheConfirmDialogAndTheReasonPrompt() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "start").status == 0)
        let session = try f.console()
        defer { session.close() }
        try session.waitFor("<= 10")
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        // Cancel has the focus: Enter on it closes the dialog and nothing is written.
        try session.press("Enter")
        try session.waitForAbsence(of: "Confirm:")
        #expect(try f.statusJSON().contains("\"microPercent\": 10000000"))

        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        try session.press("Tab", "Enter")
        try session.waitFor("Reason for the increase")
        try session.type("canary looks healthy")
        try session.press("Enter")
        try session.waitFor("<= 11")
        let status = try f.statusJSON()
        #expect(status.contains("\"microPercent\": 11000000"))
        #expect(status.contains("\"updateOrigin\": \"ROLLOUT_CONSOLE\"") && status.contains("\"description\": \"canary looks healthy\""))
        try session.press("q")
        #expect(try session.exitStatus() == 0)
        try session.waitFor("TERMINAL-RESTORED")
    }

    @Test func killSwitchAndAChangeFromAnotherOperatorShowLive() throws {
        let f = try Fixture()
        try #require(f.cli("set", "20", "--reason", "start").status == 0)
        let session = try f.console()
        defer { session.close() }
        try session.waitFor("<= 20")
        // Another operator publishes from another process: the screen follows within a refresh.
        try #require(f.cli("nudge", "+5", "--reason", "from elsewhere").status == 0)
        let after = try session.waitFor("<= 25")
        #expect(after.contains("bob@example.com"))

        try session.press("K")
        try session.waitFor("Confirm: kill switch")
        // The kill dialog focuses Kill ("3 a.m.", item 7: the HALT footer says `K kill now`, and Enter cancelled).
        try session.press("Enter")
        try session.waitFor("KILLED")
        #expect(try f.statusJSON().contains("\"state\": \"killed\""))
        // After the kill the panel says 0% and what r restores, and `v` no longer offers K (item 7).
        let killed = try session.waitFor("■ KILLED  r → 25%")
        #expect(killed.contains("Desired    0%"), "\(killed)")
        try session.press("v")
        let why = try session.waitFor("the flag is already off for everyone (killed): r resumes")
        #expect(!why.contains("K kills by hand"), "\(why)")
        try session.press("Escape")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }

    @Test func resizesToTooSmallAndBackAndEscapeCancelsAtOnce() throws {
        let f = try Fixture()
        try #require(f.cli("set", "5", "--reason", "start").status == 0)
        let session = try f.console()
        defer { session.close() }
        try session.waitFor("<= 5")
        try session.resize(width: 40, height: 10)
        try session.waitFor("too small")
        try session.resize(width: 100, height: 30)
        try session.waitFor("<= 5")
        try session.press("=")
        try session.waitUntil("the exact-value prompt") { $0.contains("Set the percentage") || $0.contains("Set exact") || $0.contains("exact") }
        try session.press("Escape")
        try session.waitUntil("the prompt to close") { !$0.contains("exact") }
        try session.press("C-c")
        #expect(try session.exitStatus() == 130)
        try session.waitFor("TERMINAL-RESTORED")
    }

    @Test func noColorDrawsWithoutColours() throws {
        let f = try Fixture()
        try #require(f.cli("set", "5", "--reason", "start").status == 0)
        let session = try f.console(environment: ["NO_COLOR": "1"])
        defer { session.close() }
        try session.waitFor("<= 5")
        let raw = try session.screenWithAttributes()
        // SGR colour parameters 30–37, 38;…, 40–47, 48;…, 90–97, 100–107 must not appear; bold/reverse may.
        let colour = try Regex(#"\x1b\[[0-9;]*(3[0-8]|4[0-8]|9[0-7]|10[0-7])(;[0-9;]*)?m"#)
        #expect(raw.firstMatch(of: colour) == nil, "colour escape in: \(raw.prefix(400))")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }

    @Test func dumbTerminalAndNoTTYGiveAClearError() throws {
        let f = try Fixture()
        try #require(f.cli("set", "5", "--reason", "start").status == 0)
        let session = try f.console(environment: ["TERM": "dumb"])
        defer { session.close() }
        #expect(try session.exitStatus() == 1)
        try session.waitFor("rollout status")
        let noTTY = try TestSupport.run(f.binary, ["console", "--store", f.store], stdin: "")
        #expect(noTTY.status == 1)
        #expect(noTTY.stderr.contains("rollout status") && noTTY.stderr.split(separator: "\n").count == 1)
    }

    /// `rollout demo` (what `make demo` runs): a temporary store, the simulated fleet in-process and the console;
    /// the counts come alive, a nudge reaches the store, and quitting removes the temporary store.
    @Test func demoRunsTheWholeLoop() throws {
        let f = try Fixture()
        let tmp = f.directory.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        let session = try TerminalSession(
            ["sh", "-c", "\(TerminalSession.quote(f.binary)) demo --scenario steady --devices 3000 --speed 120 --operator ana@example.com"],
            width: 120, height: 40, environment: ["TMPDIR": tmp.path])
        defer { session.close() }
        try session.waitFor("demo · steady")
        // Live attestation successes from the simulated fleet (the total is not zero any more).
        try session.waitUntil("live attestation counts", timeout: 30) { screen in
            screen.split(separator: "\n").contains { $0.contains(" success") && !$0.contains("✓ 0 success") }
        }
        let demoStore = try #require(try FileManager.default.contentsOfDirectory(atPath: tmp.path).first { $0.hasPrefix("rollout-demo-") })
        // A 3,000-device fleet can never show a +50% crash increase: the verdict is HOLD "not enough data yet"
        // (with the numbers) and the guardrail refuses increases; a decrease reaches the store.
        try session.waitFor("not enough data yet", timeout: 30)
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        try session.waitFor("refuses this change")
        try session.press("Escape")
        try session.waitForAbsence(of: "Confirm: nudge +1 point")
        try session.press("-")
        try session.waitFor("Confirm: nudge -1 point")
        try session.press("Tab", "Enter")
        try session.waitFor("<= 9")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
        #expect(!FileManager.default.fileExists(atPath: tmp.appendingPathComponent(demoStore).path))
    }
}
