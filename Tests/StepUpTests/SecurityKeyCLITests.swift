import Foundation
import Platform
import Rollout
import SoftwareAuthenticator
import Testing
import TestSupport
import Timekeeping

/// Security keys through the built binary: libfido2 in `rollout` reaches the software authenticator over a Unix
/// socket (`ROLLOUT_SECURITY_KEY=unix:PATH`; only the HID reports travel there, libfido2 does CTAPHID and CTAP2).
/// Enrolment, an approved change, and the refusals the write path makes with nothing published: user verification
/// off, user presence off, another relying party, a repeated counter, another base version published while the
/// key was being touched, another operator's credential from a key both enrolled. (An expired document and a
/// signature over another percentage cannot be produced through the binary, which always signs the change it is
/// about to write and checks it at once: `WritePathSecurityKeyTests` shows those refusals through libfido2.)
@Suite("Security keys through the built binary")
struct SecurityKeyCLITests {
    typealias P = PhoneStepUpCLITests
    static let ana = ["--operator", "ana@laptop"]

    final class Box: @unchecked Sendable {
        let lock = Lock()
        var value: (status: Int32, stdout: String, stderr: String)?
    }

    @Test func enrolApproveAndTheRefusals() throws {
        let s = try OperatorCLITests.Session()
        let secret = try s.enrol("ana@laptop", at: P.at(0))
        let socketPath = s.directory.appendingPathComponent("key.sock").path
        let key = try AuthenticatorSocket(path: socketPath)
        defer { key.stop() }
        let env = ["ROLLOUT_SECURITY_KEY": "unix:" + socketPath]
        func run(_ args: [String], _ t: Int64) throws -> (status: Int32, stdout: String, stderr: String) {
            try P.Running(args + Self.ana, store: s.store, at: P.at(t), environment: env).finish()
        }

        let enrolled = try run(
            ["operator", "enroll", "--method", "security-key", "--code", OperatorCLITests.code(secret, P.at(30))], 30)
        #expect(enrolled.status == 0, "\(enrolled.stderr)")
        #expect(enrolled.stdout.contains("enrolled a security key for ana@laptop"), "\(enrolled.stdout)")

        let approved = try run(["set", "100", "--reason", "all in", "--security-key"], 60)
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(approved.stderr.contains("touch your security key to approve: set 0% -> 100%"), "\(approved.stderr)")
        #expect(try P.version(s) == 2)
        let counter = key.authenticator.signCount
        #expect(try run(["set", "20", "--reason", "down"], 90).status == 0)
        #expect(try P.version(s) == 3)

        func refused(_ t: Int64, _ words: String) throws {
            let r = try run(["set", "100", "--reason", "all in", "--security-key"], t)
            #expect(r.status == 4, "\(words): \(r.stderr)")
            #expect(r.stderr.contains(words), "\(r.stderr)")
            #expect(r.stdout.isEmpty)
            #expect(try P.version(s) == 3)
        }
        key.authenticator.faults = [.noUserVerification]
        try refused(120, "did not report user verification")
        key.authenticator.faults = [.noUserPresence]
        try refused(150, "did not report user presence")
        key.authenticator.faults = [.otherRelyingParty]
        try refused(180, "another relying party")
        key.authenticator.faults = []
        key.authenticator.setSignCount(counter - 1)  // the next signature repeats the accepted counter
        try refused(210, "cloned")

        // Another operator publishes while the key is being touched: the approval names the base it saw.
        key.authenticator.setSignCount(counter + 100)
        let other = Box()
        let store = s.store
        key.beforeNextAssertion {
            let r = try? P.Running(
                ["set", "30", "--reason", "meanwhile", "--operator", "bob@desk"], store: store, at: P.at(240), environment: [:]
            ).finish()
            other.lock.withLock { other.value = r }
        }
        let raced = try run(["set", "100", "--reason", "all in", "--security-key"], 240)
        #expect(other.lock.withLock { other.value?.status } == 0)
        #expect(raced.status == 4 || raced.status == 3, "\(raced.stderr)")
        #expect(try P.version(s) == 4)

        // The key still approves a change it sees whole; every refusal was audited.
        let last = try run(["set", "100", "--reason", "all in", "--security-key"], 270)
        #expect(last.status == 0, "\(last.stderr)")
        #expect(try P.version(s) == 5)
        let results = try s.stepUpResults()
        for result in ["user-not-verified", "user-not-present", "wrong-rp", "counter-not-increased"] {
            #expect(results.contains(result), "\(result) not in \(results)")
        }
        let verify = try s.run(["audit", "verify"], at: P.at(300))
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stdout.contains("security-key approvals verified again from their records: 2"), "\(verify.stdout)")
    }

    @Test func anotherOperatorsCredentialOnASharedKey() throws {
        let s = try OperatorCLITests.Session()
        let a = try s.enrol("ana@laptop", at: P.at(0))
        let b = try s.enrol("bob@desk", at: P.at(30), approver: ("ana@laptop", OperatorCLITests.code(a, P.at(30))))
        let socketPath = s.directory.appendingPathComponent("key.sock").path
        let key = try AuthenticatorSocket(path: socketPath)
        defer { key.stop() }
        let env = ["ROLLOUT_SECURITY_KEY": "unix:" + socketPath]
        // One key, enrolled by both operators (a credential each).
        for (who, secret) in [("ana@laptop", a), ("bob@desk", b)] {
            let r = try P.Running(
                ["operator", "enroll", "--method", "security-key", "--code", OperatorCLITests.code(secret, P.at(60)),
                 "--operator", who], store: s.store, at: P.at(60), environment: env
            ).finish()
            #expect(r.status == 0, "\(who): \(r.stderr)")
        }

        // The key answers with bob's credential to ana's request: not ana's security key.
        key.authenticator.faults = [.otherCredential]
        let other = try P.Running(
            ["set", "100", "--reason", "all in", "--security-key"] + Self.ana, store: s.store, at: P.at(300),
            environment: env
        ).finish()
        #expect(other.status == 4, "\(other.stderr)")
        #expect(other.stderr.contains("not this operator's security key"), "\(other.stderr)")
        #expect(try P.version(s) == 1)
        let results = try s.stepUpResults()
        #expect(results.contains("other-credential"), "\(results)")
        // Without the fault the same key approves for ana with ana's credential.
        key.authenticator.faults = []
        let own = try P.Running(
            ["set", "100", "--reason", "all in", "--security-key"] + Self.ana, store: s.store, at: P.at(330),
            environment: env
        ).finish()
        #expect(own.status == 0, "\(own.stderr)")
        #expect(try P.version(s) == 2)
    }
}
