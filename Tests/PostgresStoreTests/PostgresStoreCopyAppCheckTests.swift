import AppCheck
import Crypto
import Foundation
@testable import PostgresStore
import SQLiteStore
import StoreCopy
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// `rollout store copy` carries the App Check exchange state (registrations, keys, the per-request state) and
/// shows its progress on a terminal only.
@Suite(.serialized)
struct PostgresStoreCopyAppCheckTests {
    let directory: URL
    let key: String
    static let app = "1:777:ios:copy"
    static let t0 = Instant(seconds: 1_780_000_000)

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-copy-appcheck")
        key = directory.appendingPathComponent("team.key").path
    }

    var environment: [String: String] { ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"] }

    @discardableResult
    func rollout(_ arguments: [String], store: String? = nil) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + (store.map { ["--store", $0] } ?? []), environment: environment
        )
    }

    /// The same questions asked of both ends give the same answers: the registrations read back equal, and the
    /// per-request state behaves the same (a used challenge stays used, a consumed token id stays consumed, a
    /// counter does not move back).
    static func probe(_ state: any AppCheckState, attested: AttestedKeyRecord) throws -> [String] {
        [
            "\(try state.redeemChallenge(Array(repeating: 1, count: 32), appId: app, expiresAt: t0 + .minutes(5)))",
            "\(try state.redeemChallenge(Array(repeating: 2, count: 32), appId: app, expiresAt: t0 + .minutes(5)))",
            "\(try state.redeemChallenge(Array(repeating: 3, count: 32), appId: app, expiresAt: t0 + .minutes(5)))",
            "\(try state.consumeToken(id: "jti-used", expiresAt: t0 + .hours(1)))",
            "\(try state.consumeToken(id: "jti-new", expiresAt: t0 + .hours(1)))",
            "\(try state.advanceCounter(appId: app, keyId: attested.keyId, to: 7))",
            "\(try state.advanceCounter(appId: app, keyId: attested.keyId, to: 8))",
        ]
    }

    @Test func theAppCheckStateIsEqualAfterTheCopy() throws {
        let server = try PostgresServer.get()
        let file = directory.appendingPathComponent("rollout.db").path
        #expect(try rollout(["init"], store: file).status == 0)
        for (app, demo) in [(Self.app, true), ("1:777:ios:other", false)] {
            let add = try rollout(
                [
                    "appcheck", "app", "add", app, "--project-number", "777", "--project-id", "copy", "--team",
                    "ABCDE12345", "--bundle", "com.example.copy",
                ]
                    + (demo ? ["--trust-demo"] : []), store: file)
            #expect(add.status == 0, "\(add.stderr)")
        }
        #expect(
            try rollout(
                ["appcheck", "debug-token", "add", "--app", Self.app, "--token", "0123456789abcdef-ci"], store: file
            ).status == 0)
        #expect(try rollout(["appcheck", "keys", "rotate"], store: file).status == 0)
        #expect(try rollout(["appcheck", "keys", "rotate"], store: file).status == 0)
        // Per-request state: a used challenge, an attested key at counter 7, a consumed token id.
        let attested = AttestedKeyRecord(
            appId: Self.app, keyId: [UInt8](repeating: 4, count: 32),
            publicKey: [0x04] + [UInt8](repeating: 5, count: 64), counter: 7,
            artifactDigest: [UInt8](repeating: 6, count: 32), receipt: [1, 2, 3], environment: .production,
            attestedAt: Self.t0)
        do {
            let source = try AppCheckStateTables(database: RolloutStore(path: file, create: false).database)
            #expect(
                try source.redeemChallenge(
                    Array(repeating: 2, count: 32), appId: Self.app, expiresAt: Self.t0 + .minutes(5)) == .redeemed)
            try source.saveAttestedKey(attested)
            #expect(try source.consumeToken(id: "jti-used", expiresAt: Self.t0 + .hours(1)))
        }
        #expect(try rollout(["audit", "verify"], store: file).status == 0)

        let target = try server.freshDatabase()
        let copy = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
        #expect(copy.status == 0, "\(copy.stderr)")
        #expect(
            copy.stdout.contains(
                "App Check state: 1 project, 2 apps, 1 challenges, 1 keys, 1 consumed_tokens, 1 debug_tokens, 2 signing_keys, 1 demo_authority"
            ),
            "\(copy.stdout)")
        #expect(!copy.stdout.contains("not copied"), "\(copy.stdout)")
        #expect(copy.stderr.isEmpty, "\(copy.stderr.debugDescription)")

        let source = try AppCheckStateTables(database: RolloutStore(path: file, create: false).database)
        let copied = PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: target), key: try StoreKey.load(key))
        #expect(try copied.configuration() == source.configuration())
        #expect(try copied.configuration()?.apps.count == 2)
        let keys = try copied.signingKeys()
        #expect(keys == (try source.signingKeys()))
        #expect(keys.count == 2 && keys.filter { $0.retiresAt == nil }.count == 1)
        #expect(try copied.debugTokens() == source.debugTokens())
        #expect(try copied.hasDebugToken(appId: Self.app, digest: SHA256.hash(Array("0123456789abcdef-ci".utf8))))
        #expect(try copied.demoAuthority() != nil && copied.demoAuthority() == source.demoAuthority())
        #expect(try copied.attestedKey(appId: Self.app, artifactDigest: attested.artifactDigest) == attested)
        let onPostgres = try Self.probe(copied, attested: attested)
        #expect(onPostgres == (try Self.probe(source, attested: attested)))
        #expect(onPostgres == ["redeemed", "alreadyUsed", "redeemed", "false", "true", "false", "true"])
        // The private keys are sealed with the team key on the PostgreSQL end.
        let raw = try PGConnection(target).query("SELECT encode(private_key, 'hex') FROM appcheck_signing_keys")
            .compactMap { $0[0] }
        #expect(raw.count == 2 && raw.allSatisfy { $0.hasPrefix(Hex.encode(PostgresAppCheckState.boxMagic)) })
        // The CLI on PostgreSQL opens the copied keys with the team key the copy recorded.
        #expect(
            try rollout(["appcheck", "keys", "list"], store: server.uris(of: target).socket).stdout.contains("signing"))
    }

    func onTerminal(_ arguments: [String]) throws -> (status: Int32, terminal: String) {
        let r = try TestSupport.runWithStderrOnTerminal(arguments, environment: environment)
        return (r.status, r.terminal)
    }

    @Test func progressOnATerminalAndNothingInAPipe() throws {
        let server = try PostgresServer.get()
        let file = directory.appendingPathComponent("big.db").path
        #expect(try rollout(["init"], store: file).status == 0)
        // 100,000 installations: enough rows for the copy to outlast the reporter's quarter second.
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000) - 600_000_000
        var text = ""
        text.reserveCapacity(10_000_000)
        for i in 0..<100_000 {
            text +=
                #"{"t":\#(now + Int64(i)),"i":"inst-\#(i)","k":"session","c":"enabled","p":"appAttest","os":"17.4"}"#
                + "\n"
        }
        let events = directory.appendingPathComponent("events.ndjson")
        try text.write(to: events, atomically: true, encoding: .utf8)
        let ingested = try rollout(["ingest", events.path, "--quiet"], store: file)
        #expect(ingested.status == 0, "\(ingested.stderr)")

        let binary = try TestSupport.rolloutBinary()
        let shown = try onTerminal([
            binary, "store", "copy", "--from", file, "--to", server.uris(of: try server.freshDatabase()).socket,
        ])
        #expect(shown.status == 0, "\(shown.terminal)")
        let draws = shown.terminal.components(separatedBy: "\r").filter { $0.hasPrefix("store copy  ") }
        print("store copy of 100,000 installations on a terminal: \(draws.count) progress redraws")
        #expect(!draws.isEmpty, "\(shown.terminal.debugDescription)")
        #expect(draws.allSatisfy { $0.contains(" rows (") && $0.contains(" of ") }, "\(draws)")
        // Erased at the end: the summary on stdout starts on a clean line.
        #expect(shown.terminal.hasSuffix("\r\u{1B}[K"), "\(shown.terminal.debugDescription)")

        let quiet = try onTerminal([
            binary, "store", "copy", "--from", file, "--to", server.uris(of: try server.freshDatabase()).socket,
            "--quiet",
        ])
        #expect(quiet.status == 0 && quiet.terminal.isEmpty, "\(quiet.terminal.debugDescription)")
        let piped = try rollout([
            "store", "copy", "--from", file, "--to", server.uris(of: try server.freshDatabase()).socket,
        ])
        #expect(piped.status == 0 && piped.stderr.isEmpty, "\(piped.stderr.debugDescription)")
        #expect(piped.stdout.contains("100000 installations"), "\(piped.stdout)")
    }
}
