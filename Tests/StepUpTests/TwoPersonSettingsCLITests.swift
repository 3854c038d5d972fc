import Crypto
import Foundation
import Rollout
import RolloutApp
import StepUp
import Testing
import TestSupport
import Timekeeping

/// The two-person rule for policy relaxations, through the built binary: the first operator's code records a
/// request, a second operator's code applies it once; self-approval, expiry and a moved setting are refused and
/// audited; a tightening and a kill are never held.
@Suite("Two-person rule for policy relaxations")
struct TwoPersonSettingsCLITests {
    static func at(_ seconds: Int64) -> Instant { PhoneStepUpCLITests.at(seconds) }
    static let ana = ["--operator", "ana@laptop"]
    static let bob = ["--operator", "bob@desk"]

    static func requestID(_ stderr: String) -> String? {
        guard let range = stderr.range(of: "recorded as request ") else { return nil }
        return String(stderr[range.upperBound...].prefix(16))
    }

    static func value(_ s: OperatorCLITests.Session, _ key: String, at time: Instant) throws -> String? {
        let shown = try s.run(["policy", "show"], at: time).stdout
        return shown.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(key + " ") }
            .map { $0.split(separator: " ", omittingEmptySubsequences: true)[1] }.map(String.init)
    }

    @Test func aRelaxationNeedsASecondOperatorOnce() throws {
        let s = try OperatorCLITests.Session()
        let a = try s.enrol("ana@laptop", at: Self.at(0))
        let b = try s.enrol("bob@desk", at: Self.at(30), approver: ("ana@laptop", OperatorCLITests.code(a, Self.at(30))))
        func code(_ secret: TOTPSecret, _ t: Int64) -> String { OperatorCLITests.code(secret, Self.at(t)) }
        #expect(try s.run(["policy", "set", "two-person", "on", "--code", code(a, 60)] + Self.ana, at: Self.at(60)).status == 0)
        let before = try Self.value(s, "increase-over", at: Self.at(60))
        #expect(before == "10")

        // A relaxation asked by ana alone is recorded as a request, not applied.
        let asked = try s.run(["policy", "set", "increase-over", "50", "--code", code(a, 90)] + Self.ana, at: Self.at(90))
        #expect(asked.status == 4, "\(asked.stderr)")
        #expect(asked.stderr.contains("needs a second operator (two-person rule: weakens increase-over)"), "\(asked.stderr)")
        let id = try #require(Self.requestID(asked.stderr))
        #expect(try Self.value(s, "increase-over", at: Self.at(90)) == "10")

        // ana cannot approve her own request.
        let own = try s.run(["approve", id, "--code", code(a, 120)] + Self.ana, at: Self.at(120))
        #expect(own.status == 4 && own.stderr.contains("cannot approve it too"), "\(own.stderr)")
        #expect(try Self.value(s, "increase-over", at: Self.at(120)) == "10")

        // bob approves with his own code: applied, audited with both names.
        let approved = try s.run(["approve", id, "--code", code(b, 120)] + Self.bob, at: Self.at(120))
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(approved.stdout.contains("requested by ana@laptop, approved by bob@desk"), "\(approved.stdout)")
        #expect(try Self.value(s, "increase-over", at: Self.at(120)) == "50")
        #expect(
            try s.audit().contains {
                $0.result == .stepUpAccepted && $0.actor == "bob@desk"
                    && $0.detail == "result approved; two-person-request \(id); requested-by ana@laptop; approved-by bob@desk"
            })
        // Once: a second approval finds nothing left to change.
        let again = try s.run(["approve", id, "--code", code(b, 150)] + Self.bob, at: Self.at(150))
        #expect(again.status == 4, "\(again.stderr)")
        #expect(try Self.value(s, "increase-over", at: Self.at(150)) == "50")

        // A tightening is not held.
        let tighter = try s.run(["policy", "set", "increase-over", "20", "--code", code(a, 180)] + Self.ana, at: Self.at(180))
        #expect(tighter.status == 0, "\(tighter.stderr)")
        #expect(try Self.value(s, "increase-over", at: Self.at(180)) == "20")

        // An expired request is refused (15 minutes), audited, and nothing changes.
        let late = try s.run(["policy", "set", "lockout-attempts", "9", "--code", code(a, 210)] + Self.ana, at: Self.at(210))
        let lateID = try #require(Self.requestID(late.stderr), "\(late.stderr)")
        let expired = try s.run(["approve", lateID, "--code", code(b, 210 + 16 * 60)] + Self.bob, at: Self.at(210 + 16 * 60))
        #expect(expired.status == 4 && expired.stderr.contains("expired"), "\(expired.stderr)")
        #expect(try Self.value(s, "lockout-attempts", at: Self.at(210 + 16 * 60)) == "3")
        #expect(try s.audit().contains { $0.detail == "result expired; two-person-request \(lateID)" })

        // A request for a setting that moved since is refused: ana tightens lockout-attempts to 2 first.
        let moving = try s.run(["policy", "set", "lockout-attempts", "8", "--code", code(a, 1200)] + Self.ana, at: Self.at(1200))
        let movingID = try #require(Self.requestID(moving.stderr), "\(moving.stderr)")
        #expect(try s.run(["policy", "set", "lockout-attempts", "2", "--code", code(a, 1230)] + Self.ana, at: Self.at(1230)).status == 0)
        let moved = try s.run(["approve", movingID, "--code", code(b, 1230)] + Self.bob, at: Self.at(1230))
        #expect(moved.status == 4 && moved.stderr.contains("the state moved since"), "\(moved.stderr)")
        #expect(try Self.value(s, "lockout-attempts", at: Self.at(1230)) == "2")

        // A kill is never held.
        #expect(try s.run(["kill", "--reason", "stop"] + Self.ana, at: Self.at(1260)).status == 0)
        #expect(try s.run(["audit", "verify"], at: Self.at(1260)).status == 0)
    }

    /// One operator cannot stand in for two: the rule needs two operators to be turned on, an enrolment under it
    /// needs two approvers (a second identity vouched for by its owner alone would approve her requests), and an
    /// operator's removal is held for a second one and never leaves fewer than two.
    @Test func oneOperatorCannotBecomeTwo() throws {
        let s = try OperatorCLITests.Session()
        func code(_ secret: TOTPSecret, _ t: Int64) -> String { OperatorCLITests.code(secret, Self.at(t)) }
        let a = try s.enrol("ana@laptop", at: Self.at(0))
        let alone = try s.run(["policy", "set", "two-person", "on", "--code", code(a, 30)] + Self.ana, at: Self.at(30))
        #expect(alone.status == 4 && alone.stderr.contains("needs two enrolled operators and only one is"), "\(alone.stderr)")
        #expect(try Self.value(s, "two-person", at: Self.at(30)) == "off")
        let b = try s.enrol("bob@desk", at: Self.at(60), approver: ("ana@laptop", code(a, 60)))
        let c = try s.enrol("cy@home", at: Self.at(90), approver: ("ana@laptop", code(a, 90)))
        #expect(try s.run(["policy", "set", "two-person", "on", "--code", code(a, 120)] + Self.ana, at: Self.at(120)).status == 0)

        // An enrolment approved by ana alone, or by ana twice, starts nothing.
        let puppet = ["operator", "enroll", "--operator", "puppet@laptop", "--approver", "ana@laptop", "--approver-code"]
        let one = try s.run(puppet + [code(a, 150)], at: Self.at(150))
        #expect(one.status == 4 && one.stderr.contains("needs a second enrolled operator's approval"), "\(one.stderr)")
        let twice = try s.run(puppet + [code(a, 180), "--approver", "ana@laptop", "--approver-code", code(a, 210)], at: Self.at(210))
        #expect(twice.status == 4 && twice.stderr.contains("must be another operator's"), "\(twice.stderr)")
        let listed = try s.run(["operator", "list"], at: Self.at(210)).stdout
        #expect(!listed.contains("puppet@laptop"), "\(listed)")
        // With bob's code as well, the enrolment starts, and the audit names both approvers.
        let both = try s.run(puppet + [code(a, 240), "--approver", "bob@desk", "--approver-code", code(b, 240)], at: Self.at(240))
        #expect(both.status == 0, "\(both.stderr)")
        #expect(try s.audit().contains { $0.action == "two-person operator enroll puppet@laptop" && $0.detail == "approved-by ana@laptop; approved-by bob@desk" })

        // A removal asked by ana alone is a request; cy approves it.
        let asked = try s.run(["operator", "remove", "bob@desk", "--code", code(a, 270)] + Self.ana, at: Self.at(270))
        #expect(asked.status == 4 && asked.stderr.contains("needs a second operator"), "\(asked.stderr)")
        #expect(try s.run(["operator", "list"], at: Self.at(270)).stdout.contains("bob@desk"))
        let id = try #require(Self.requestID(asked.stderr), "\(asked.stderr)")
        let approved = try s.run(["approve", id, "--code", code(c, 300), "--operator", "cy@home"], at: Self.at(300))
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(!(try s.run(["operator", "list"], at: Self.at(300)).stdout.contains("bob@desk")))
        // Two operators left: removing either is refused outright.
        let last = try s.run(["operator", "remove", "cy@home", "--code", code(a, 330)] + Self.ana, at: Self.at(330))
        #expect(last.status == 4 && last.stderr.contains("would leave one"), "\(last.stderr)")
        #expect(try s.run(["operator", "list"], at: Self.at(330)).stdout.contains("cy@home"))

        // A larger fixed failure baseline blinds that class's alarm: a relaxation, held.
        let blind = try s.run(
            ["policy", "set", "failures.baseline-percent.serverUnavailable", "99", "--code", code(a, 360)] + Self.ana, at: Self.at(360))
        #expect(blind.status == 4 && blind.stderr.contains("needs a second operator"), "\(blind.stderr)")
        #expect(try Self.value(s, "failures.baseline-percent.serverUnavailable", at: Self.at(360)) == "frozen")
        #expect(try s.run(["audit", "verify"], at: Self.at(360)).status == 0)
    }

    /// A request is only what the chain of the audit log holds: one operator with write access to the store file
    /// plants a request in another's name (a row below the chain's first, or an old record rewritten in place),
    /// then approves it with her own code. Both are refused, audited, and the setting stays; an honest request
    /// made afterwards still goes through.
    @Test(arguments: ["planted", "rewritten"])
    func aRequestPlantedInTheAuditLogIsNotARequest(_ how: String) throws {
        let s = try OperatorCLITests.Session()
        func code(_ secret: TOTPSecret, _ t: Int64) -> String { OperatorCLITests.code(secret, Self.at(t)) }
        let a = try s.enrol("ana@laptop", at: Self.at(0))
        let b = try s.enrol("bob@desk", at: Self.at(30), approver: ("ana@laptop", code(a, 30)))
        #expect(try s.run(["policy", "set", "two-person", "on", "--code", code(a, 60)] + Self.ana, at: Self.at(60)).status == 0)

        let id = "00112233aabbccdd"
        let us = Self.at(90).microseconds
        let intent = "setting," + Hex.encode(Array("two-person".utf8)) + "," + Hex.encode(Array("off".utf8))
        let change = "policy set two-person: on → off"
        let detail = "two-person-request \(id); expires-us \(us + 600_000_000); intent \(intent); why x"
        let sql =
            how == "planted"
            ? "INSERT INTO config_audit (sequence, time, actor, action, from_state, to_state, reason, result, version, "
                + "detail, previous_hash, hash) VALUES (-1, \(us), 'bob@desk', 'two-person request \(change)', '', "
                + "'\(change)', '', 'recorded', NULL, '\(detail)', 'x', 'x')"
            : "UPDATE config_audit SET actor = 'bob@desk', action = 'two-person request \(change)', to_state = "
                + "'\(change)', result = 'recorded', detail = '\(detail)' WHERE sequence = 2"
        let edited = try TestSupport.run("/usr/bin/sqlite3", [s.store, sql])
        try #require(edited.status == 0, "\(edited.stderr)")

        let forged = try s.run(["approve", id, "--code", code(a, 90)] + Self.ana, at: Self.at(90))
        #expect(forged.status == 4, "\(forged.stderr)")
        #expect(forged.stderr.contains("request \(id) cannot be trusted: the audit log breaks at audit record"), "\(forged.stderr)")
        #expect(try Self.value(s, "two-person", at: Self.at(90)) == "on")
        #expect(!(try s.audit().contains { $0.detail.contains("requested-by bob@desk") }))

        // The damage is named by audit verify; the honest path still works on top of it.
        #expect(try s.run(["audit", "verify"], at: Self.at(90)).status != 0)
        let asked = try s.run(["policy", "set", "increase-over", "50", "--code", code(a, 120)] + Self.ana, at: Self.at(120))
        let real = try #require(Self.requestID(asked.stderr), "\(asked.stderr)")
        let approved = try s.run(["approve", real, "--code", code(b, 150)] + Self.bob, at: Self.at(150))
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(try Self.value(s, "increase-over", at: Self.at(150)) == "50")
    }

    @Test func aRelaxationOfAFailureBaselineIsAWeakening() {
        let key = "failures.baseline-percent.serverUnavailable"
        #expect(TwoPersonSettingsRequest.relaxation(key, from: "frozen", to: "5") != nil)
        #expect(TwoPersonSettingsRequest.relaxation(key, from: "5", to: "frozen") != nil)
        #expect(TwoPersonSettingsRequest.relaxation(key, from: "5", to: "9") != nil)
        #expect(TwoPersonSettingsRequest.relaxation(key, from: "9", to: "5") == nil)
        #expect(TwoPersonSettingsRequest.relaxation("a-key-not-known-yet", from: "1", to: "2") != nil)
        #expect(TwoPersonSettingsRequest.relaxation("increase-over", from: "50", to: "10") == nil)
    }
}
