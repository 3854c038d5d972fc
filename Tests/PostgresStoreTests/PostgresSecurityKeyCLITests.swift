import Foundation
import Crypto
@testable import PostgresStore
import Rollout
import SoftwareAuthenticator
import StoreSupport
import Testing
import TestSupport
import Timekeeping
import StepUp

/// Security keys on a PostgreSQL team store, through the built binary under faketime with the software
/// authenticator on a socket: enrolment stores the credential sealed, a change to 100% approved by the key
/// publishes and `audit verify` checks the approval again; a repeated counter is refused with nothing published.
@Suite(.serialized)
struct PostgresSecurityKeyCLITests {
    static let t0 = Instant(seconds: 1_780_000_005)
    static func at(_ s: Int64) -> Instant { Instant(seconds: t0.seconds + s) }

    @Test func enrolApproveAndARepeatedCounter() throws {
        let directory = try TestSupport.temporaryDirectory("pg-security-key")
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyFile = directory.appendingPathComponent("team.key").path
        let server = try PostgresServer.get()
        let conninfo = try server.uris(of: server.freshDatabase()).socket
        let socketPath = directory.appendingPathComponent("key.sock").path
        let key = try AuthenticatorSocket(path: socketPath)
        defer { key.stop() }
        func run(_ args: [String], _ t: Int64) throws -> TestSupport.ProcessResult {
            let stamp = Self.at(t).iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            return try TestSupport.run(
                try TestSupport.rolloutBinary(), args + ["--store", conninfo],
                stdin: "",
                environment: [
                    "TZ": "UTC", "ROLLOUT_STORE_KEY": keyFile, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1",
                    "ROLLOUT_SECURITY_KEY": "unix:" + socketPath,
                ],
                fakeTime: "@\(stamp)")
        }
        #expect(try run(["init", "--seed", "pg-keys"], -60).status == 0)
        let started = try run(["operator", "enroll", "--qr", "none"], 0)
        let uri = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") }, "\(started.stderr)")
        let base32 = try #require(uri.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(base32)))
        func code(_ t: Int64) -> String { TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: Self.at(t))) }
        #expect(try run(["operator", "enroll", "--code", code(0)], 0).status == 0)

        let enrolled = try run(["operator", "enroll", "--method", "security-key", "--code", code(30)], 30)
        #expect(enrolled.status == 0, "\(enrolled.stderr)")
        let store = try PostgresConfigStore(conninfo: conninfo)
        let stepUp = PostgresStepUpStore(store: store, key: try StoreKey.load(keyFile))
        let credential = try #require(try stepUp.securityKey(try OperatorID("ana@test")))
        #expect(credential.relyingParty.hasPrefix("rollout:postgresql "))
        let raw = try store.connection.query("SELECT encode(credential, 'hex') FROM stepup_security_keys").first?.first ?? nil
        #expect(raw.map { !$0.contains(Hex.encode(credential.credentialID)) } == true, "the credential is stored sealed")

        let approved = try run(["set", "100", "--reason", "all in", "--security-key"], 60)
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(try store.current().info.number == 2)
        #expect(try run(["set", "20", "--reason", "down"], 90).status == 0)

        key.authenticator.setSignCount(key.authenticator.signCount - 1)
        let repeated = try run(["set", "100", "--reason", "all in", "--security-key"], 120)
        #expect(repeated.status == 4 && repeated.stderr.contains("cloned"), "\(repeated.stderr)")
        #expect(try store.current().info.number == 3)

        let verify = try run(["audit", "verify"], 150)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stdout.contains("security-key approvals verified again from their records: 1"), "\(verify.stdout)")
    }
}
