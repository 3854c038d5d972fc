import Foundation
import StepUp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// Interactive enrolment in a real terminal (tmux on a private socket, 80×24): the QR code as the terminal
/// shows it is read back from the screen, decoded by zbar, and the code computed from the decoded URI is typed.
@Suite("Enrolment in a terminal")
struct EnrolmentTerminalTests {
    final class Terminal {
        let socket = "stepup-\(UUID().uuidString.prefix(8))"

        init(_ command: String, columns: Int = 80, rows: Int = 24) throws {
            let r = try TestSupport.run(
                try TestSupport.python(),
                [
                    "-c", Self.detached, "/usr/bin/tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-x",
                    "\(columns)",
                    "-y", "\(rows)", command,
                ])
            try #require(r.status == 0, "tmux failed to start (Debian's tmux): \(r.stderr)")
        }

        /// Starts a daemon cleanly from a test process. Foundation's Process learns that a child ended when the
        /// descriptors it gave the child close, so the tmux server (which outlives its client) must inherit none
        /// of them, nor the pipes of tests running in parallel; and it must not inherit the blocked signal mask
        /// of the test's worker thread, or it never handles `kill-server`.
        static let detached = """
            import os, signal, sys
            os.closerange(3, 4096)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            for s in (signal.SIGPIPE, signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGCHLD):
                signal.signal(s, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.argv[1], sys.argv[1:])
            """

        func close() { _ = try? tmux(["kill-server"]) }

        @discardableResult
        func tmux(_ arguments: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run("/usr/bin/tmux", ["-L", socket] + arguments)
        }

        func screen(colours: Bool = false) throws -> String {
            try tmux(["capture-pane", "-p"] + (colours ? ["-e"] : [])).stdout
        }

        /// Waits until `text` is on screen (at most 20 s, polling), and returns the screen.
        func waitFor(_ text: String) throws -> String {
            for _ in 0..<400 {
                let s = try screen()
                if s.contains(text) { return s }
                usleep(50_000)
            }
            throw TestSupport.Failure("'\(text)' never appeared; the screen:\n\(try screen())")
        }

        func type(_ keys: String) throws { try tmux(["send-keys", keys, "Enter"]) }
    }

    @Test func scanTheScreenTypeTheCodeAndEnrol() throws {
        let dir = try TestSupport.temporaryDirectory("stepup-tty")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("rollout.db").path
        let binary = try TestSupport.rolloutBinary()
        try #require(try TestSupport.run(binary, ["init", "--store", store]).status == 0)
        let t = try Terminal(
            "env -u NO_COLOR \(binary) operator enroll --store \(store) --operator ana@laptop; echo EXIT=$?; sleep 60")
        defer { t.close() }
        let prompt = "Code from the authenticator (empty: later):"
        let screen = try t.waitFor(prompt)

        // The whole code is on the 24-line screen, drawn in fixed colours whatever the terminal's theme.
        let drawing = screen.split(separator: "\n", omittingEmptySubsequences: false).prefix {
            !$0.hasPrefix("Code from")
        }
        .filter { $0.contains("█") }.map(String.init)
        #expect(drawing.count == 23)
        #expect(try t.screen(colours: true).contains("\u{1B}[97m\u{1B}[40m"))
        let light = try QRCodeTests.lightModules(
            drawing.map { $0.padding(toLength: drawing[0].count, withPad: " ", startingAt: 0) }, lightIsDrawn: true)
        let image = dir.appendingPathComponent("screen.pbm")
        try QRCodeTests.pbm(light, scale: 4).write(to: image, atomically: true, encoding: .ascii)
        let decoded = try TestSupport.run("/usr/bin/zbarimg", ["--quiet", "--raw", "--nodbus", image.path])
        try #require(decoded.status == 0, "zbarimg could not read the screen: \(decoded.stderr)")
        let uri = decoded.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(uri.hasPrefix("otpauth://totp/rollout:ana@laptop?secret="))
        let secretText = try #require(uri.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(secretText)))

        try t.type("12345")
        _ = try t.waitFor("not a 6-digit code for ana@laptop's new authenticator (3 attempts left)")
        try t.type(TOTP.standard.code(secret: secret, at: SystemClock().now()))
        let done = try t.waitFor("EXIT=")
        #expect(done.contains("Enrolled ana@laptop."))
        #expect(done.contains("EXIT=0"))
        let record = try #require(
            try OperatorTables.record(try OperatorID("ana@laptop"), in: try RolloutStore(path: store, create: false).database))
        #expect(record.secret == secret)
    }
}
