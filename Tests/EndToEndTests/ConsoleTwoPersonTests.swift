import Foundation
import Platform
import SoftwareAuthenticator
import SQLiteStore
import StepUp
import Testing
import TestSupport
import Timekeeping

/// The two-person rule through the built binary in real terminals (tmux): two operators, each with a console and
/// a software security key (libfido2 in `rollout` reaches it over a Unix socket). Ana proposes 100% in her console
/// and approves it with her key: the console says a second operator must approve, with the request id. Her own
/// approval of it is refused, Bob's approval after the request expired is refused, Bob's approval in time
/// publishes it once from his console (`:approve ID`; a second approval, console or CLI, changes nothing), and the history and audit views name who approved and
/// who proposed. A kill from Bob's console while another request is pending is never gated. Before all that,
/// Esc on "touch your security key" abandons the key's request and nothing is published (for Ana's change and
/// for Bob's approval in his console).
@Suite("two-person rule in the console", .serialized)
struct ConsoleTwoPersonTests {
    static let ana = "ana@lab"
    static let bob = "bob@lab"

    /// Blocks the software key's next answer until `release` (bounded), as a key nobody has touched yet.
    final class Touch: @unchecked Sendable {
        let semaphore = DispatchSemaphore(value: 0)
        func hold(_ key: AuthenticatorSocket) { key.beforeNextAssertion { [semaphore] in _ = semaphore.wait(timeout: .now() + 20) } }
        func release() { semaphore.signal() }
    }

    @Test func proposeApproveExpireKillAndCancel() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        let keyA = try AuthenticatorSocket(path: f.directory.appendingPathComponent("a.sock").path)
        defer { keyA.stop() }
        let keyB = try AuthenticatorSocket(path: f.directory.appendingPathComponent("b.sock").path)
        defer { keyB.stop() }
        let envA = ["ROLLOUT_SECURITY_KEY": "unix:" + keyA.path, "NO_COLOR": ""]
        let envB = ["ROLLOUT_SECURITY_KEY": "unix:" + keyB.path, "NO_COLOR": ""]

        /// The binary as `who`, `minutesAgo` minutes ago (libfaketime; 0: now) or `secondsAhead` from now.
        func cli(
            _ who: String, _ arguments: [String], minutesAgo: Int = 0, secondsAhead: Int = 0, stdin: String? = nil,
            environment: [String: String] = [:]
        ) throws -> TestSupport.ProcessResult {
            let args = arguments + ["--store", f.store, "--operator", who]
            if minutesAgo == 0 && secondsAhead == 0 {
                return try TestSupport.run(f.binary, args, stdin: stdin, environment: environment)
            }
            let offset = minutesAgo != 0 ? "-\(minutesAgo)m" : "+\(secondsAhead)"
            return try TestSupport.run(f.binary, args, stdin: stdin, environment: environment, fakeTime: offset)
        }
        func code(_ secret: TOTPSecret, minutesAgo: Int) -> String {
            TOTP.standard.code(secret: secret, at: Instant(seconds: Int64(Date().timeIntervalSince1970) - Int64(minutesAgo * 60)))
        }
        func enrol(_ who: String, minutesAgo: Int, approver: (String, TOTPSecret)? = nil) throws -> TOTPSecret {
            var args = ["operator", "enroll"]
            if let (name, secret) = approver { args += ["--approver", name, "--approver-code", code(secret, minutesAgo: minutesAgo)] }
            let started = try cli(who, args, minutesAgo: minutesAgo)
            try #require(started.status == 0, "\(started.stderr)")
            let secret = try #require(OperatorCLITestsSecret.parse(started.stdout))
            let confirmed = try cli(who, ["operator", "enroll", "--code", "-"], minutesAgo: minutesAgo, stdin: code(secret, minutesAgo: minutesAgo) + "\n")
            try #require(confirmed.status == 0, "\(confirmed.stderr)")
            return secret
        }
        func version() throws -> Int { try RolloutStore(path: f.store, create: false).configStore().current().info.number }

        // The rollout at 50% before anyone is enrolled; then Ana and Bob, a security key each, the two-person rule.
        try #require(try cli(Self.bob, ["set", "50", "--reason", "start"], minutesAgo: 59).status == 0)
        let a = try enrol(Self.ana, minutesAgo: 58)
        let b = try enrol(Self.bob, minutesAgo: 56, approver: (Self.ana, a))
        let keyEnrolA = try cli(
            Self.ana, ["operator", "enroll", "--method", "security-key", "--code", code(a, minutesAgo: 54)], minutesAgo: 54, environment: envA)
        try #require(keyEnrolA.status == 0, "\(keyEnrolA.stderr)")
        let keyEnrolB = try cli(
            Self.bob, ["operator", "enroll", "--method", "security-key", "--code", code(b, minutesAgo: 52)], minutesAgo: 52, environment: envB)
        try #require(keyEnrolB.status == 0, "\(keyEnrolB.stderr)")
        let rule = try cli(Self.ana, ["policy", "set", "two-person", "on", "--code", code(a, minutesAgo: 50)], minutesAgo: 50)
        try #require(rule.status == 0, "\(rule.stderr)")
        let base = try version()

        func console(_ who: String, _ env: [String: String]) throws -> TerminalSession {
            let command = [f.binary, "console", "--store", f.store, "--operator", who].map(TerminalSession.quote).joined(separator: " ")
            return try TerminalSession(["sh", "-c", command], width: 160, height: 40, environment: env.mapValues { $0 })
        }
        let consoleA = try console(Self.ana, envA)
        defer { consoleA.close() }
        let consoleB = try console(Self.bob, envB)
        defer { consoleB.close() }
        try consoleA.waitFor("<= 50", timeout: 20)
        try consoleB.waitFor("<= 50", timeout: 20)

        /// Ana asks for 100%: under the two-person rule only a security key can approve it, so the console goes
        /// straight to her key (no method chooser).
        func proposeFullWithKey() throws {
            try consoleA.press("=")
            try consoleA.waitFor("Set the percentage")
            try consoleA.type("100")
            try consoleA.press("Enter")
            try consoleA.waitFor("Confirm: set 100%")
            try consoleA.press("Tab", "Enter")
            try consoleA.waitFor("Reason for the increase")
            try consoleA.type("all in")
            try consoleA.press("Enter")
        }

        // Esc while the key waits for a touch: abandoned, nothing published, nothing approved.
        let touch = Touch()
        touch.hold(keyA)
        try proposeFullWithKey()
        let waiting = try consoleA.waitFor("Touch your security key")
        #expect(waiting.contains(" s left"), "the countdown: \(waiting)")
        try consoleA.press("Escape")
        try consoleA.waitFor("security key's approval was abandoned")
        touch.release()

        // Again, touched: recorded as a request, not published; the console names its id.
        try proposeFullWithKey()
        let awaiting = try consoleA.waitFor("Awaiting a second operator", timeout: 15)
        let id = try #require(awaiting.firstMatch(of: /request ([0-9a-f]{16})/)?.1).description
        // The abandoned approval never reached the write path: one accepted step-up record, for this request.
        #expect(try version() == base)

        // Ana alone cannot complete it.
        let own = try cli(Self.ana, ["approve", id], environment: envA)
        #expect(own.status == 4, "\(own.stderr)")
        #expect(try version() == base)
        // Nor with a one-time code instead of the key: reaching 100% under the rule needs security keys.
        let alone = try cli(Self.ana, ["set", "100", "--reason", "alone", "--code", code(a, minutesAgo: 0)])
        #expect(alone.status == 4, "\(alone.stdout) \(alone.stderr)")
        #expect(alone.stderr.contains("needs security-key"), "\(alone.stderr)")
        #expect(try version() == base)
        // Bob, once the request has expired (15 minutes): refused.
        let late = try cli(Self.bob, ["approve", id], secondsAhead: 16 * 60, environment: envB)
        #expect(late.status == 4, "\(late.stderr)")
        #expect(late.stderr.contains("expired"), "\(late.stderr)")
        #expect(try version() == base)
        // Ana's own console cannot approve it either: refused by the write path, with the reason shown.
        try consoleA.type(":approve " + id)
        try consoleA.press("Enter")
        let ownInConsole = try consoleA.waitFor("Request \(id) not approved", timeout: 15)
        #expect(ownInConsole.contains("cannot approve it too"), "\(ownInConsole)")
        #expect(try version() == base)
        // Bob in time, from his console (`:approve ID`, his key): published once; a second approval, from his
        // console or the CLI, changes nothing.
        // Esc while Bob's key waits for a touch: abandoned, nothing published.
        let touchB = Touch()
        touchB.hold(keyB)
        try consoleB.type(":approve " + id)
        try consoleB.press("Enter")
        let waitingB = try consoleB.waitFor("Touch your security key to approve request \(id)")
        #expect(waitingB.contains(" s left"), "the countdown: \(waitingB)")
        try consoleB.press("Escape")
        try consoleB.waitFor("approval of request \(id) was abandoned")
        touchB.release()
        #expect(try version() == base)
        try consoleB.type(":approve " + id)
        try consoleB.press("Enter")
        try consoleB.waitFor("Published v\(base + 1): ", timeout: 15)
        try consoleB.waitFor("request \(id) approved")
        #expect(try version() == base + 1)
        try consoleB.type(":approve " + id)
        try consoleB.press("Enter")
        try consoleB.waitFor("Request \(id) not approved", timeout: 15)
        #expect(try version() == base + 1)
        let again = try cli(Self.bob, ["approve", id], environment: envB)
        #expect(again.status != 0, "\(again.stdout)")
        #expect(try version() == base + 1)
        try consoleA.waitFor("<= 100", timeout: 10)
        try consoleB.waitFor("<= 100", timeout: 10)

        // Who approved, in the history and the audit view, and in the CLI's history.
        let approvedText = "approved by \(Self.bob) (security key), proposed by \(Self.ana)"
        try consoleA.press("h")
        try consoleA.waitFor(approvedText)
        try consoleA.press("Escape")
        try consoleA.press("a")
        try consoleA.waitFor(approvedText)
        try consoleA.press("Escape")
        #expect(try cli(Self.bob, ["history"]).stdout.contains(approvedText))
        #expect(try cli(Self.bob, ["audit", "show"]).stdout.contains(approvedText))

        // Back to 50% (a decrease: no factor), a new request pending, and Bob kills from his console: never gated.
        try consoleA.press("=")
        try consoleA.waitFor("Set the percentage")
        try consoleA.type("50")
        try consoleA.press("Enter")
        try consoleA.waitFor("Confirm: set 50%")
        try consoleA.press("Tab", "Enter")
        try consoleA.waitFor("<= 50", timeout: 10)
        #expect(try version() == base + 2)
        try proposeFullWithKey()
        // The message log may still show the first request's line: wait for a line naming another request.
        func awaitedRequests(_ screen: String) -> [String] {
            screen.matches(of: /Awaiting a second operator: request ([0-9a-f]{16})/).map { String($0.1) }
        }
        let second = try consoleA.waitUntil("a second request awaiting approval", timeout: 15) {
            awaitedRequests($0).contains { $0 != id }
        }
        let pending = try #require(awaitedRequests(second).first { $0 != id })
        try consoleB.press("K")
        try consoleB.waitFor("Confirm: kill")
        try consoleB.press("Enter")
        try consoleA.waitFor("KILLED", timeout: 10)
        #expect(try version() == base + 3)
        // The pending request is for a rollout that has moved: refused, nothing published.
        let stale = try cli(Self.bob, ["approve", pending], environment: envB)
        #expect(stale.status != 0, "\(stale.stdout)")
        #expect(try version() == base + 3)
        try consoleB.type(":approve " + pending)
        try consoleB.press("Enter")
        let staleInConsole = try consoleB.waitFor("Request \(pending) not approved", timeout: 15)
        #expect(staleInConsole.contains("conflict"), "\(staleInConsole)")
        #expect(try version() == base + 3)
        func line(_ screen: String, _ text: String) -> String {
            screen.split(separator: "\n").first { $0.contains(text) }.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        }
        print("two-person console: Ana's own :approve: \(line(ownInConsole, "not approved"))")
        print("two-person console: Bob's :approve after the kill: \(line(staleInConsole, "not approved"))")
        print("two-person console: request \(id) published once as v\(base + 1) by \(Self.bob)'s approval; kill as v\(base + 3) with request \(pending) pending")
    }
}

/// The TOTP secret in `operator enroll`'s output (its otpauth URI).
enum OperatorCLITestsSecret {
    static func parse(_ output: String) -> TOTPSecret? {
        guard let line = output.split(separator: "\n").first(where: { $0.contains("otpauth://totp/") }),
            let query = line.split(separator: "?").last,
            let pair = query.split(separator: "&").first(where: { $0.hasPrefix("secret=") })
        else { return nil }
        return TOTPSecret(base32: String(pair.dropFirst("secret=".count)))
    }
}
