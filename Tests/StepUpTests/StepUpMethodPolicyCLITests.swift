import Foundation
import Rollout
import StepUp
import Testing
import TestSupport
import Timekeeping

/// The policy per change kind and method (`policy set step-up.reach-100 phone`) and the lockout per method,
/// through the built binary against the Verify v2 fake, on an SQLite store file and on a PostgreSQL team store.
@Suite("Step-up methods per change kind, and a lockout per method")
struct StepUpMethodPolicyCLITests {
    typealias P = PhoneStepUpCLITests
    static let ana = P.ana

    @Test(arguments: P.Backend.allCases) func aChangeKindAcceptsOnlyTheMethodsThePolicyNames(_ backend: P.Backend) throws {
        let fake = try P.Fake()
        let (s, secret) = try P.enrolled(fake, backend)
        let set = try s.run(
            ["policy", "set", "step-up.reach-100", "phone", "--code", OperatorCLITests.code(secret, P.at(60))] + Self.ana,
            at: P.at(60))
        #expect(set.status == 0, "\(set.stderr)")
        #expect(set.stdout.contains("step-up.reach-100 = phone"), "\(set.stdout)")
        #expect(try s.run(["policy", "show"], at: P.at(60)).stdout.contains("step-up.reach-100"))
        let dry = try s.run(["set", "100", "--reason", "all in", "--dry-run"] + Self.ana, at: P.at(60))
        #expect(dry.stdout.contains("accepted methods: phone"), "\(dry.stdout)")

        // A one-time code is refused for reaching 100%, naming the method needed, and is not used up.
        let code = OperatorCLITests.code(secret, P.at(90))
        let refused = try s.run(["set", "100", "--reason", "all in", "--code", code] + Self.ana, at: P.at(90))
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(refused.stderr.contains("needs phone (policy step-up.reach-100"), "\(refused.stderr)")
        #expect(refused.stderr.contains("totp is not accepted") && refused.stderr.contains("--phone"), "\(refused.stderr)")
        #expect(try P.version(s) == 1)
        #expect(try s.audit().contains { $0.detail.hasPrefix("result method-not-allowed; method totp") })
        // Kinds the policy does not restrict still take the code (the same one: the refusal did not use it).
        #expect(try s.run(["set", "20", "--reason", "step", "--code", code] + Self.ana, at: P.at(90)).status == 0)
        #expect(try P.version(s) == 2)

        // The phone is accepted.
        let run = try P.Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: P.at(120),
            environment: fake.environment)
        run.type(try fake.message(after: 0).code)
        let done = try run.finish()
        #expect(done.status == 0, "\(done.stderr)")
        #expect(try P.version(s) == 3)

        // Settings changes are approved by one-time codes only, and the values are checked.
        let settingsKind = try s.run(
            ["policy", "set", "step-up.policy-change", "security-key", "--code", OperatorCLITests.code(secret, P.at(150))]
                + Self.ana, at: P.at(150))
        #expect(settingsKind.status == 2 && settingsKind.stderr.contains("one-time code only"), "\(settingsKind.stderr)")
        let bad = try s.run(
            ["policy", "set", "step-up.reach-100", "fax", "--code", OperatorCLITests.code(secret, P.at(150))] + Self.ana,
            at: P.at(150))
        #expect(bad.status == 2 && bad.stderr.contains("totp, phone, security-key"), "\(bad.stderr)")
        try P.expectNoCode(fake, [done.stdout, done.stderr], s)
    }

    @Test(arguments: P.Backend.allCases) func aLockedOneTimeCodeLeavesThePhoneMethodOpen(_ backend: P.Backend) throws {
        let fake = try P.Fake()
        let (s, secret) = try P.enrolled(fake, backend)
        let wrong = OperatorCLITests.wrongCode(secret, at: P.at(60))
        for _ in 0..<3 {
            #expect(try s.run(["set", "100", "--reason", "all in", "--code", wrong] + Self.ana, at: P.at(60)).status == 4)
        }
        let locked = try s.run(
            ["set", "100", "--reason", "all in", "--code", OperatorCLITests.code(secret, P.at(90))] + Self.ana, at: P.at(90))
        #expect(locked.status == 4 && locked.stderr.contains("locked out"), "\(locked.stderr)")
        let run = try P.Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: P.at(90),
            environment: fake.environment)
        run.type(try fake.message(after: 0).code)
        let done = try run.finish()
        #expect(done.status == 0, "\(done.stderr)")
        #expect(try P.version(s) == 2)
    }
}
