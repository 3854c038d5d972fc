import AppCheck
import Crypto
import Foundation
import Timekeeping

/// App Check: verifications per second on one core against pyattest on the same vectors, assertions against
/// libcrypto's own ECDSA P-256 verify rate (`openssl speed`), and the simulated device side the fleet uses.
enum AppCheckBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "appcheck", title: "App Attest verification (one core) vs pyattest and openssl speed", run: run)
    ]

    /// A real vector that pyattest can check too (its client data is a challenge, not a raw hash).
    struct Vector {
        var name: String
        var attestation: [UInt8]
        var keyId: [UInt8]
        var challenge: [UInt8]
        var app: AppIdentity
        var environment: AppAttestEnvironment
        var at: Instant
        var assertion: [UInt8]
        var assertionClientDataHash: [UInt8]
    }

    static func vectors() throws -> [Vector] {
        let dir =
            ProcessInfo.processInfo.environment["ROLLOUT_SHARED"].map { $0 + "/vectors/appattest" }
            ?? "../shared/vectors/appattest"
        return try ["webauthn4j-kayak-2020", "veehaitch-ios-14.4"].map { name in
            let url = URL(fileURLWithPath: "\(dir)/\(name).json")
            guard let data = FileManager.default.contents(atPath: url.path),
                let j = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                let c = j["client_data_hash_or_challenge"] as? [String: Any],
                let a = (j["assertions"] as? [[String: Any]])?.first,
                let ac = a["client_data_hash_or_challenge"] as? [String: Any]
            else { throw BenchError("vector \(url.path) missing or unreadable (run from the repository root)") }
            func b64(_ v: Any?) -> [UInt8] { Base64.decode(v as? String ?? "") ?? [] }
            return Vector(
                name: name, attestation: b64(j["attestation_b64"]), keyId: b64(j["key_id_b64"]),
                challenge: b64(c["value_b64"]),
                app: AppIdentity(teamId: j["team_id"] as? String ?? "", bundleId: j["bundle_id"] as? String ?? ""),
                environment: AppAttestEnvironment(rawValue: j["environment"] as? String ?? "") ?? .production,
                at: ISO8601.parse(j["verify_at_time"] as? String ?? "") ?? Instant(seconds: 0),
                assertion: b64(a["assertion_b64"]), assertionClientDataHash: SHA256.hash(b64(ac["value_b64"])))
        }
    }

    /// Runs `body` repeatedly for about `seconds` and returns calls per second.
    static func rate(seconds: Double = 2, _ body: () throws -> Void) rethrows -> Double {
        var n = 0
        let start = Stopwatch.nanoseconds()
        var elapsed = 0.0
        repeat {
            for _ in 0..<16 { try body() }
            n += 16
            elapsed = Double(Stopwatch.nanoseconds() - start) / 1e9
        } while elapsed < seconds
        return Double(n) / elapsed
    }

    static func run() throws {
        let vs = try vectors()
        let attestationVerifier = AttestationVerifier()
        var i = 0
        let ours = try rate {
            let v = vs[i % vs.count]
            i += 1
            _ = try attestationVerifier.verify(
                attestation: v.attestation, keyId: v.keyId, clientDataHash: SHA256.hash(v.challenge), app: v.app,
                environment: v.environment, at: v.at)
        }
        let keys = try vs.map { v in
            try attestationVerifier.verify(
                attestation: v.attestation, keyId: v.keyId, clientDataHash: SHA256.hash(v.challenge), app: v.app,
                environment: v.environment, at: v.at
            ).publicKey
        }
        let parsedKeys = keys.map { P256PublicKey(uncompressedPoint: $0)! }
        let assertionVerifiers = vs.map { AssertionVerifier(app: $0.app) }
        var j = 0
        let oursAssertion = try rate {
            let k = j % vs.count
            j += 1
            _ = try assertionVerifiers[k].verify(
                assertion: vs[k].assertion, clientDataHash: vs[k].assertionClientDataHash, publicKey: parsedKeys[k],
                previousCounter: 0)
        }
        var m = 0
        let oursAssertionStored = try rate {
            let k = m % vs.count
            m += 1
            _ = try assertionVerifiers[k].verify(
                assertion: vs[k].assertion, clientDataHash: vs[k].assertionClientDataHash, publicKey: keys[k],
                previousCounter: 0)
        }
        let peer = try pyattestRates(vs, keys: keys)
        let ceiling = try openSSLSpeed(["ecdsap256"], column: "verify/s", row: "nistp256")

        report(
            "attestation verifications/s (real Apple chains, P-384 CA)", value: ours, unit: "/s",
            against: ("pyattest", peer.attestation))
        report(
            "assertion verifications/s (key loaded once)", value: oursAssertion, unit: "/s",
            against: ("pyattest", peer.assertion))
        report(
            "assertion verifications/s (key loaded once)", value: oursAssertion, unit: "/s",
            against: ("openssl speed ecdsap256 verify", ceiling), target: (0.5, true))
        report(
            "assertion verifications/s (key parsed from the stored point each time)", value: oursAssertionStored,
            unit: "/s",
            against: ("openssl speed ecdsap256 verify", ceiling))

        // The device side the fleet simulator uses: key generation, a demo-CA attestation, and its verification.
        let authority = try DemoCertificateAuthority.generate()
        let demoVerifier = AttestationVerifier(trust: authority.trustAnchors)
        let app = AppIdentity(teamId: "DEMOTEAM42", bundleId: "dev.rollout.demo")
        let time = ISO8601.parse("2026-06-01T12:00:00Z")!
        let count = 10_000
        let seconds = try Stopwatch.time {
            for n in 0..<count {
                let device = try SimulatedAppAttestKey(authority: authority, app: app, environment: .production)
                let cdh = SHA256.hash(Array("challenge \(n)".utf8))
                let attestation = try device.attestation(clientDataHash: cdh, at: time)
                _ = try demoVerifier.verify(
                    attestation: attestation, keyId: device.keyId, clientDataHash: cdh, app: app,
                    environment: .production, at: time)
            }
        }
        report(
            "10,000 simulated devices: key + attestation + verification", value: seconds, unit: "s", limit: 5,
            higherIsBetter: false)

        // The whole exchange in memory: challenge, attestation, token; then an assertion and a token.
        let state = InMemoryAppCheckState()
        _ = state.saveDemoAuthority(authority.material)
        let appId = "1:123456789012:ios:demo"
        let exchange = try AppCheckExchange(
            configuration: AppCheckConfiguration(
                project: AppCheckProject(number: "123456789012", id: "rollout-demo"),
                apps: [AppAttestApp(appId: appId, identity: app, environment: .production, trustsDemoRoot: true)]),
            state: state, clock: ManualClock(time))
        let device = try SimulatedAppAttestKey(authority: authority, app: app, environment: .production)
        let c0 = try exchange.generateChallenge(appId: appId).challenge
        let artifact = try exchange.exchangeAttestation(
            appId: appId, attestation: device.attestation(clientDataHash: SHA256.hash(c0), at: time),
            keyId: device.keyId, challenge: c0
        ).artifact
        let exchangeRate = try rate {
            let c = try exchange.generateChallenge(appId: appId).challenge
            _ = try exchange.exchangeAssertion(
                appId: appId, artifact: artifact,
                assertion: device.assertion(clientDataHash: SHA256.hash(artifact + c)), challenge: c)
        }
        let rsa = try openSSLSpeed(["rsa2048"], column: "sign/s", row: "rsa 2048")
        report(
            "exchangeAppAttestAssertion + RS256 token, in memory", value: exchangeRate, unit: "/s",
            against: ("openssl speed rsa2048 sign", rsa))
    }

    /// pyattest's rates on the same vectors, each run under faketime at the vector's instant.
    static func pyattestRates(_ vs: [Vector], keys: [[UInt8]]) throws -> (attestation: Double, assertion: Double) {
        let python = try peerPython()
        var attestations = 0.0, attestationSeconds = 0.0, assertions = 0.0, assertionSeconds = 0.0
        for (v, key) in zip(vs, keys) {
            let input: [String: Any] = [
                "attestation": Base64.encode(v.attestation), "key_id": Base64.encode(v.keyId),
                "challenge": Base64.encode(v.challenge),
                "app_id": v.app.appId, "production": v.environment == .production,
                "assertion": Base64.encode(v.assertion),
                "assertion_cdh": Base64.encode(v.assertionClientDataHash), "public_key": Base64.encode(key),
            ]
            let stamp = String(v.at.iso8601.replacingOccurrences(of: "T", with: " ").prefix(19))
            let out = try runProcess(
                "/usr/bin/faketime", ["-f", "@\(stamp)", python, "-c", pyattestLoop],
                stdin: try JSONSerialization.data(withJSONObject: input),
                environment: ["TZ": "UTC", "FAKETIME_DONT_FAKE_MONOTONIC": "1"])
            guard let r = try JSONSerialization.jsonObject(with: out) as? [String: Double], let an = r["attestations"],
                let asec = r["attestation_seconds"],
                let sn = r["assertions"], let ssec = r["assertion_seconds"]
            else { throw BenchError("pyattest bench printed no figures") }
            attestations += an
            attestationSeconds += asec
            assertions += sn
            assertionSeconds += ssec
        }
        return (attestations / attestationSeconds, assertions / assertionSeconds)
    }

    static let pyattestLoop = """
        import asyncio, base64, json, sys, time
        from cryptography.hazmat.primitives.asymmetric import ec
        from pyattest.assertion import Assertion
        from pyattest.attestation import Attestation
        from pyattest.configs.apple import AppleConfig
        c = json.load(sys.stdin)
        b = base64.b64decode
        config = AppleConfig(key_id=b(c["key_id"]), app_id=c["app_id"], production=c["production"])
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b(c["public_key"]))
        async def attest(seconds):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                await Attestation(b(c["attestation"]), b(c["challenge"]), config).verify()
                n += 1
            return n, time.perf_counter() - start
        an, asec = asyncio.run(attest(1.5))
        sn, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.5:
            Assertion(b(c["assertion"]), b(c["assertion_cdh"]), key, config).verify()
            sn += 1
        json.dump({"attestations": an, "attestation_seconds": asec, "assertions": sn, "assertion_seconds": time.perf_counter() - start}, sys.stdout)
        """

    /// One figure from `openssl speed -seconds 3 ALG` (single process, so one core).
    static func openSSLSpeed(_ algorithms: [String], column: String, row: String) throws -> Double {
        let out = String(
            decoding: try runProcess("/usr/bin/openssl", ["speed", "-seconds", "3"] + algorithms), as: UTF8.self)
        let lines = out.split(separator: "\n").map(String.init)
        guard let header = lines.last(where: { $0.contains(column) }),
            let line = lines.last(where: { $0.contains(row) && !$0.contains(column) })
        else { throw BenchError("openssl speed printed no \(column) for \(row)") }
        // The figure columns are the last fields; the header names them in the same order.
        let names = header.split(separator: " ").map(String.init)
        let fields = line.split(separator: " ").map(String.init)
        guard let index = names.firstIndex(of: column), let value = Double(fields[fields.count - (names.count - index)])
        else {
            throw BenchError("cannot read \(column) from: \(line)")
        }
        return value
    }

    static func runProcess(
        _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String] = [:]
    ) throws -> Data {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        p.environment = env
        let out = Pipe()
        let input = Pipe()
        p.standardOutput = out
        p.standardInput = input
        p.standardError = FileHandle.nullDevice
        try p.run()
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try input.fileHandleForWriting.close()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw BenchError("\(executable) \(arguments.joined(separator: " ")) exited \(p.terminationStatus)")
        }
        return data
    }
}
