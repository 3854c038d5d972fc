import Foundation
import Rollout
import StepUp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// The `rollout operator` and `rollout policy` commands, run as the real binary under libfaketime (Debian's
/// `faketime`), so that each invocation sees a chosen wall-clock time and the codes can be computed ahead.
@Suite("rollout operator / policy commands")
struct OperatorCLITests {
    static let t0 = Instant(seconds: 1_780_000_005)  // 15 s into a time step

    final class Session {
        let directory: URL
        let store: String
        var outputs: [String] = []

        init() throws {
            directory = try TestSupport.temporaryDirectory("stepup-cli")
            store = directory.appendingPathComponent("rollout.db").path
            // Only init creates a store; a minute before the tests' first instant.
            let created = try run(["init"], at: Instant(seconds: OperatorCLITests.t0.seconds - 60))
            guard created.status == 0 else { throw TestSupport.Failure("init failed: \(created.stderr)") }
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        @discardableResult
        func run(_ arguments: [String], at time: Instant, stdin: String? = nil) throws -> TestSupport.ProcessResult {
            let stamp = time.iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            let result = try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", store],
                stdin: stdin, environment: ["TZ": "UTC", "NO_COLOR": "", "ROLLOUT_OPERATOR": "nobody"],
                fakeTime: "@\(stamp)")
            outputs.append(result.stdout + result.stderr)
            return result
        }

        /// Starts and confirms the enrolment of `id` at `time`; returns the secret read from the printed URI.
        func enrol(_ id: String, at time: Instant, approver: (String, String)? = nil) throws -> TOTPSecret {
            var args = ["operator", "enroll", "--operator", id]
            if let (who, code) = approver { args += ["--approver", who, "--approver-code", code] }
            let started = try run(args, at: time)
            try #require(started.status == 0, "\(started.stderr)")
            let secret = try #require(Self.secret(in: started.stdout))
            let code = TOTP.standard.code(secret: secret, at: time)
            let confirmed = try run(
                ["operator", "enroll", "--operator", id, "--code", "-"], at: time, stdin: code + "\n")
            try #require(confirmed.status == 0, "\(confirmed.stderr)")
            #expect(confirmed.stdout.hasPrefix("Enrolled \(id)"))
            return secret
        }

        static func secret(in output: String) -> TOTPSecret? {
            guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("URI: otpauth://totp/") }),
                let query = line.split(separator: "?").last,
                let pair = query.split(separator: "&").first(where: { $0.hasPrefix("secret=") })
            else { return nil }
            return TOTPSecret(base32: String(pair.dropFirst("secret=".count)))
        }

        func database() throws -> SQLiteDatabase { try RolloutStore(path: store, create: false).database }

        /// The store's audit log, oldest first.
        func audit() throws -> [AuditEntry] {
            try RolloutStore(path: store, create: false).configStore().auditRecords(limit: 1000, before: nil).reversed()
                .map(\.entry)
        }

        /// The outcome of every step-up attempt in the audit log, oldest first.
        func stepUpResults() throws -> [String] {
            try audit().filter { $0.action.hasPrefix("step-up ") }.map {
                String($0.detail.split(separator: ";")[0].dropFirst("result ".count))
            }
        }
    }

    /// A code that matches no step within the verifier's reach of `time`, so it is `wrong`, not `expired`.
    static func wrongCode(_ secret: TOTPSecret, at time: Instant) -> String {
        let step = TOTP.standard.step(at: time)
        let near = Set((step - 12...step + 12).map { TOTP.standard.code(secret: secret, step: $0) })
        return (0..<1000).map { String(format: "%06d", $0 * 997 % 1_000_000) }.first { !near.contains($0) }!
    }

    static func code(_ secret: TOTPSecret, _ time: Instant, step offset: Int64 = 0) -> String {
        TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: time) + offset)
    }

    /// "Every door", item 6. Reproduction: with step-up on, `appcheck app add --trust-demo --token-ttl 7d`,
    /// `appcheck debug-token add` (it mints a credential) and `appcheck keys rotate` needed no code and left the
    /// audit log unchanged. They are intents of the settings write path now: audited, a code under the policy key
    /// `appcheck`, `--read-only` refused with 4, and nothing changed by a refusal.
    @Test func appCheckRegistrationsAreAuditedAndNeedACode() throws {
        let s = try Session()
        let ana = ["--operator", "ana@laptop"]
        let app = [
            "appcheck", "app", "add", "1:123456789:ios:abc", "--project-number", "123456789", "--project-id", "demo",
            "--team", "8YE23NZS57", "--bundle", "com.example.app",
        ]
        #expect(try s.run(app + ana, at: Self.t0).status == 0)
        #expect(try s.audit().contains { $0.action == "appcheck app add 1:123456789:ios:abc" && $0.actor == "ana@laptop" })
        let secret = try s.enrol("ana@laptop", at: Self.t0)
        let keysBefore = try s.run(["appcheck", "keys", "list"], at: Self.t0).stdout
        let appsBefore = try s.run(["appcheck", "app", "list"], at: Self.t0).stdout
        let auditBefore = try s.audit().filter { $0.action.hasPrefix("appcheck ") }.count

        let refused = [
            app + ["--trust-demo", "--token-ttl", "7d"],
            ["appcheck", "debug-token", "add", "--app", "1:123456789:ios:abc", "--name", "ci"],
            ["appcheck", "keys", "rotate"],
            ["appcheck", "app", "remove", "1:123456789:ios:abc"],
        ]
        for args in refused {
            let r = try s.run(args + ana, at: Self.t0)
            #expect(r.status == 4, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("needs a fresh code (an App Check registration)") && r.stderr.contains("--code"), "\(r.stderr)")
            #expect(r.stdout.isEmpty, "\(args) printed \(r.stdout)")
            let readOnly = try s.run(args + ana + ["--read-only", "--code", Self.code(secret, Self.t0)], at: Self.t0)
            #expect(readOnly.status == 4, "\(args) --read-only: \(readOnly.stderr)")
        }
        #expect(try s.run(["appcheck", "keys", "list"], at: Self.t0).stdout == keysBefore)
        #expect(try s.run(["appcheck", "app", "list"], at: Self.t0).stdout == appsBefore)
        #expect(try s.audit().filter { $0.action.hasPrefix("appcheck ") }.count == auditBefore)

        // With a fresh code each time, each is applied and audited once.
        var t = Self.t0
        for args in refused {
            t = t + .seconds(Int64(30))
            let r = try s.run(args + ana + ["--code", Self.code(secret, t)], at: t)
            #expect(r.status == 0, "\(args): \(r.stderr)")
        }
        let actions = try s.audit().filter { $0.action.hasPrefix("appcheck ") }.map(\.action)
        #expect(
            actions.suffix(4) == [
                "appcheck app change 1:123456789:ios:abc", "appcheck debug-token add 1:123456789:ios:abc ci",
                "appcheck keys rotate", "appcheck app remove 1:123456789:ios:abc",
            ])
        // The debug token is a credential: only its digest is audited.
        let token = try s.audit().first { $0.action.hasPrefix("appcheck debug-token add") }
        #expect(token?.to.contains("sha256") == true)
        #expect(try s.run(["audit", "verify"], at: t).status == 0)
    }

    /// Rollout changes through the CLI's write path: the default rules ask for a code, a replayed code is
    /// refused, a kill never needs one; every attempt is audited and a refusal leaves the store unchanged.
    @Test func rolloutChangesNeedAFreshCodeWhenPolicySaysSo() throws {
        let s = try Session()
        let secret = try s.enrol("ana@laptop", at: Self.t0)
        let ana = ["--operator", "ana@laptop"]
        func percent() throws -> String {
            let out = try s.run(["status", "--json"], at: Self.t0).stdout
            return out.split(separator: "\n").first { $0.contains("\"microPercent\"") }.map(String.init) ?? ""
        }
        let before = try percent()
        let missing = try s.run(["set", "20", "--reason", "step"] + ana, at: Self.t0)
        #expect(missing.status == 4)
        #expect(missing.stderr.contains("step-up") && missing.stderr.contains("--code"))
        #expect(try percent() == before)

        let t1 = Self.t0 + .seconds(Int64(30))
        let good = Self.code(secret, t1)
        #expect(try s.run(["set", "20", "--reason", "step", "--code", good] + ana, at: t1).status == 0)
        // A small step needs no code; crossing 50% does, and the code already used is refused.
        #expect(try s.run(["nudge", "+5", "--reason", "small"] + ana, at: t1).status == 0)
        let replay = try s.run(["set", "60", "--reason", "cross", "--code", good] + ana, at: t1)
        #expect(replay.status == 4 && replay.stderr.contains("step-up"))
        #expect(try s.run(["kill", "--reason", "drill"] + ana, at: t1).status == 0)
        #expect(try percent().contains("25000000"))
        let results = try s.stepUpResults()
        #expect(results.contains { $0.hasPrefix("accepted") } && results.filter { !$0.hasPrefix("accepted") }.count >= 2)
    }

    @Test func enrolmentShowsTheSecretOnceAndAPolicyChangeNeedsAFreshCode() throws {
        let s = try Session()
        let started = try s.run(["operator", "enroll", "--operator", "ana@laptop"], at: Self.t0)
        #expect(started.status == 0)
        #expect(started.stderr.contains("Enrolment of ana@laptop is pending"))
        #expect(started.stdout.contains("████ ▄▄▄▄▄ █"))  // the top of a finder pattern inside the quiet zone
        #expect(!started.stdout.contains("\u{1B}["))  // no colour when stdout is not a terminal
        let secret = try #require(Session.secret(in: started.stdout))
        let attributes = try FileManager.default.attributesOfItem(atPath: s.store)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        // Pending operators do not turn step-up on.
        let pendingShow = try s.run(["policy", "show", "--json"], at: Self.t0)
        #expect(pendingShow.stdout.contains("\"enforced\" : false"))

        let wrong = try s.run(
            ["operator", "enroll", "--operator", "ana@laptop", "--code", Self.wrongCode(secret, at: Self.t0)],
            at: Self.t0)
        #expect(wrong.status == 4)
        #expect(wrong.stderr.contains("wrong code for ana@laptop's new authenticator (2 attempts left)"))
        let confirmed = try s.run(
            ["operator", "enroll", "--operator", "ana@laptop", "--code", Self.code(secret, Self.t0)], at: Self.t0)
        #expect(confirmed.status == 0)
        let again = try s.run(["operator", "enroll", "--operator", "ana@laptop"], at: Self.t0)
        #expect(again.status == 1)
        #expect(again.stderr.contains("already enrolled"))

        // A policy change without a code, with the code already used to confirm, then with the next one.
        let missing = try s.run(["policy", "set", "increase-over", "20", "--operator", "ana@laptop"], at: Self.t0)
        #expect(missing.status == 4)
        #expect(missing.stderr.contains("refused: policy-change increase-over 20 needs a fresh code (a policy change)"))
        #expect(missing.stderr.contains("(--code CODE)"))
        let replayed = try s.run(
            ["policy", "set", "increase-over", "20", "--operator", "ana@laptop", "--code", Self.code(secret, Self.t0)],
            at: Self.t0)
        #expect(replayed.status == 4)
        #expect(replayed.stderr.contains("code already used"))
        let stranger = try s.run(
            ["policy", "set", "increase-over", "20", "--operator", "mallory", "--code", "123456"], at: Self.t0)
        #expect(stranger.status == 4)
        #expect(stranger.stderr.contains("mallory is not enrolled"))
        let unchanged = try s.run(["policy", "show", "--json"], at: Self.t0)
        #expect(unchanged.stdout.contains("\"increase-over\" : \"10\""))
        #expect(unchanged.stdout.contains("\"enforced\" : true"))

        let accepted = try s.run(
            [
                "policy", "set", "increase-over", "20", "--operator", "ana@laptop", "--code",
                Self.code(secret, Self.t0, step: 1),
            ], at: Self.t0)
        #expect(accepted.status == 0, "\(accepted.stderr)")
        #expect(accepted.stdout == "increase-over = 20\n")
        let show = try s.run(["policy", "show"], at: Self.t0)
        #expect(show.stdout.contains("Step-up verification is on (1 operator enrolled)."))
        #expect(show.stdout.contains("increase-over       20"))
        let bad = try s.run(["policy", "set", "lockout-minutes", "0", "--operator", "ana@laptop"], at: Self.t0)
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("lockout-minutes takes a whole number from 1 to 1440"))

        let readOnly = try s.run(["policy", "set", "rollback", "off", "--read-only"], at: Self.t0)
        #expect(readOnly.status == 4)
        #expect(readOnly.stderr.contains("read-only") && readOnly.stderr.hasPrefix("rollout: refused"))

        let list = try s.run(["operator", "list", "--json"], at: Self.t0)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        let operators = try #require(json["operators"] as? [[String: Any]])
        #expect(operators.map { $0["id"] as? String } == ["ana@laptop"])
        #expect(
            operators.first?["lastCodeAt"] as? String
                == TOTP.standard.start(ofStep: TOTP.standard.step(at: Self.t0) + 1).iso8601)

        // Every attempt and every change is in the audit log; no output after enrolment and no record holds the
        // secret.
        #expect(try s.stepUpResults() == ["wrong", "accepted", "missing", "replayed", "not-enrolled", "accepted"])
        let audit = try s.audit()
        #expect(audit.contains { $0.action == "operator enroll" && $0.to == "ana@laptop" && $0.result == .recorded })
        #expect(audit.contains { $0.action == "policy set increase-over" && $0.from == "10" && $0.to == "20" })
        #expect(!audit.map { "\($0)" }.joined().contains(secret.base32))
        // outputs[0] is init's, outputs[1] the enrolment's (the one place the secret is shown).
        for output in s.outputs.dropFirst(2) {
            #expect(!output.contains(secret.base32))
            #expect(!output.contains("secret="))
        }
    }

    @Test func anotherOperatorNeedsApprovalAndRemovalIsProtected() throws {
        let s = try Session()
        let ana = try s.enrol("ana@laptop", at: Self.t0)
        let t1 = Self.t0 + .seconds(Int64(30))
        let unapproved = try s.run(["operator", "enroll", "--operator", "bob@desk"], at: t1)
        #expect(unapproved.status == 4)
        #expect(unapproved.stderr.contains("needs an enrolled operator's approval"))
        let badApproval = try s.run(
            [
                "operator", "enroll", "--operator", "bob@desk", "--approver", "ana@laptop", "--approver-code",
                Self.wrongCode(ana, at: t1),
            ], at: t1)
        #expect(badApproval.status == 4)
        #expect(!badApproval.stdout.contains("otpauth://"))
        _ = try s.enrol("bob@desk", at: t1, approver: ("ana@laptop", Self.code(ana, t1)))

        let list = try s.run(["operator", "list"], at: t1)
        #expect(list.stdout.contains("Step-up verification is on (2 enrolled)."))

        let t2 = t1 + .seconds(Int64(30))
        let noCode = try s.run(["operator", "remove", "bob@desk", "--operator", "ana@laptop"], at: t2)
        #expect(noCode.status == 4)
        let removed = try s.run(
            ["operator", "remove", "bob@desk", "--operator", "ana@laptop", "--code", Self.code(ana, t2)], at: t2)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout == "Removed bob@desk.\n")
        let last = try s.run(
            ["operator", "remove", "ana@laptop", "--operator", "ana@laptop", "--code", Self.code(ana, t2, step: 1)],
            at: t2)
        #expect(last.stdout.contains("Step-up verification is now off"))
        #expect(try OperatorTables.isEnforced(in: try s.database()) == false)
    }

    /// A pending enrolment that an approver's code let in is removed with a code too. Before, anyone who could
    /// run the command (mallory, not enrolled, no code) removed it.
    @Test func aPendingEnrolmentIsRemovedOnlyWithACode() throws {
        let s = try Session()
        let ana = try s.enrol("ana@laptop", at: Self.t0)
        let t1 = Self.t0 + .seconds(Int64(30))
        let started = try s.run(
            ["operator", "enroll", "--operator", "carol@z", "--approver", "ana@laptop", "--approver-code", Self.code(ana, t1)],
            at: t1)
        #expect(started.status == 0, "\(started.stderr)")
        let stranger = try s.run(["operator", "remove", "carol@z", "--operator", "mallory@evil"], at: t1)
        #expect(stranger.status == 4, "\(stranger.stdout) \(stranger.stderr)")
        #expect(!stranger.stdout.contains("Removed"))
        #expect(try s.run(["operator", "list"], at: t1).stdout.contains("carol@z"))
        let noCode = try s.run(["operator", "remove", "carol@z", "--operator", "ana@laptop"], at: t1)
        #expect(noCode.status == 4, "\(noCode.stderr)")
        let t2 = t1 + .seconds(Int64(30))
        let removed = try s.run(
            ["operator", "remove", "carol@z", "--operator", "ana@laptop", "--code", Self.code(ana, t2)], at: t2)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout == "Removed the pending enrolment of carol@z.\n")
        #expect(!(try s.run(["operator", "list"], at: t2).stdout.contains("carol@z")))
    }

    @Test func threeWrongCodesLockTheOperatorOutForFifteenMinutes() throws {
        let s = try Session()
        let ana = try s.enrol("ana", at: Self.t0)
        let t1 = Self.t0 + .seconds(Int64(30))
        let wrong = Self.wrongCode(ana, at: t1)
        for _ in 0..<3 {
            #expect(
                try s.run(["policy", "set", "rollback", "off", "--operator", "ana", "--code", wrong], at: t1).status
                    == 4)
        }
        let locked = try s.run(
            ["policy", "set", "rollback", "off", "--operator", "ana", "--code", Self.code(ana, t1)], at: t1)
        #expect(locked.status == 4)
        #expect(locked.stderr.contains("ana is locked out of step-up until"))
        let listed = try s.run(["operator", "list"], at: t1)
        #expect(listed.stdout.contains("locked out until"))

        let later = t1 + .minutes(15) + .seconds(Int64(5))
        let released = try s.run(
            ["policy", "set", "rollback", "off", "--operator", "ana", "--code", Self.code(ana, later)], at: later)
        #expect(released.status == 0, "\(released.stderr)")
        #expect(
            try s.stepUpResults().suffix(5) == [
                "wrong", "wrong", "wrong", "locked-out", "accepted",
            ])
    }
}
