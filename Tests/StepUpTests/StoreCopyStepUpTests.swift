import Crypto
import Foundation
import PostgresStore
import Rollout
import SoftwareAuthenticator
import SQLiteStore
import StepUp
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// `rollout store copy` carries the second factors: an operator's security key (its signature counter as it is)
/// and phone (the number sealed again with the team store key), so the copied operator steps up with them on the
/// PostgreSQL store, and a key's old counter is still refused there as a cloned key's.
@Suite("store copy carries security keys and phones")
struct StoreCopyStepUpTests {
    typealias P = PhoneStepUpCLITests

    @Test func aCopiedOperatorStepsUpWithTheirKeyAndPhone() throws {
        let fake = try P.Fake()
        let (file, secret) = try P.enrolled(fake, .sqlite)
        let socketPath = file.directory.appendingPathComponent("key.sock").path
        let key = try AuthenticatorSocket(path: socketPath)
        defer { key.stop() }
        let keyEnv = ["ROLLOUT_SECURITY_KEY": "unix:" + socketPath]
        let enrolled = try file.run(
            ["operator", "enroll", "--method", "security-key", "--code", OperatorCLITests.code(secret, P.at(60))] + P.ana,
            at: P.at(60), environment: keyEnv)
        try #require(enrolled.status == 0, "\(enrolled.stderr)")
        // Approved once on the file: the stored counter moves past the enrolment's.
        let approved = try file.run(["set", "100", "--reason", "all in", "--security-key"] + P.ana, at: P.at(90), environment: keyEnv)
        try #require(approved.status == 0, "\(approved.stderr)")
        #expect(try file.run(["set", "20", "--reason", "down"] + P.ana, at: P.at(95)).status == 0)
        let ana = try OperatorID("ana@laptop")
        let stepUpOnFile = SQLiteStepUpStore(store: try RolloutStore(path: file.location, create: false))
        let counter = try #require(try stepUpOnFile.securityKey(ana)).signCount
        #expect(counter > 0)

        let server = try PostgresServer.get()
        let target = server.uris(of: try server.freshDatabase()).socket
        let teamKey = file.directory.appendingPathComponent("team.key").path
        let copy = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["store", "copy", "--from", file.location, "--to", target, "--quiet"],
            environment: ["ROLLOUT_STORE_KEY": teamKey, "ROLLOUT_OPERATOR": "ana@laptop", "NO_COLOR": "1"])
        try #require(copy.status == 0, "\(copy.stderr)")
        #expect(copy.stdout.contains("1 operators, 0 pending enrolments, 1 security keys, 1 phones"), "\(copy.stdout)")
        #expect(!copy.stdout.contains("not copied"), "\(copy.stdout)")

        let team = try P.Store(adopting: target, keyFile: teamKey)
        let stepUp = PostgresStepUpStore(store: try PostgresConfigStore(conninfo: target), key: try StoreKey.load(teamKey))
        #expect(try stepUp.securityKey(ana)?.signCount == counter)
        #expect(try stepUp.phoneEnrolment(ana)?.number == P.number)
        // Sealed again: the team store holds neither the number nor the file's boxes.
        let raw = try team.rawText()
        #expect(!raw.contains("447700900123") && !raw.contains(Hex.encode(Array("447700900123".utf8))))

        // A key that signs with a counter the file had already seen is refused as cloned: the counter was carried.
        key.authenticator.setSignCount(counter - 1)
        let cloned = try team.run(["set", "100", "--reason", "all in", "--security-key"] + P.ana, at: P.at(120), environment: keyEnv)
        #expect(cloned.status == 4 && cloned.stderr.contains("cloned"), "\(cloned.stderr)")
        let before = try team.version()
        key.authenticator.setSignCount(counter + 10)
        let byKey = try team.run(["set", "100", "--reason", "all in", "--security-key"] + P.ana, at: P.at(150), environment: keyEnv)
        #expect(byKey.status == 0, "\(byKey.stderr)")
        #expect(try team.version() == before + 1)

        // The phone, on the team store.
        #expect(try team.run(["set", "20", "--reason", "down"] + P.ana, at: P.at(160)).status == 0)
        let run = try P.Running(
            ["set", "100", "--reason", "all in", "--phone"] + P.ana, store: team, at: P.at(180), environment: fake.environment)
        let sms = try fake.message(after: 0)
        #expect(sms.to == "447700900123")
        run.type(sms.code)
        let done = try run.finish()
        #expect(done.status == 0, "\(done.stderr)")
        #expect(try team.version() == before + 3)
        #expect(try team.run(["audit", "verify"], at: P.at(200)).status == 0)
        try P.expectNoCode(fake, [done.stdout, done.stderr, copy.stdout, copy.stderr], team)
    }
}
