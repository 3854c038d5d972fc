import AppCheck
import CommandLineKit
import RolloutApp
import Crypto
import Glibc
import Platform
import JSON
import Timekeeping

/// `rollout attest verify` and `rollout token verify`: the App Check verifiers, one check per line.
enum AttestCommands {
    static let all: [Command] = [attest, token]

    static let attest = Command(
        "attest", summary: "Verify App Attest attestations and assertions.",
        subcommands: [
            Command(
                "verify", summary: "Verify an attestation (and optionally one assertion) with every Apple check.",
                discussion: "Runs each check of Apple's procedure against the pinned Apple App Attestation Root CA and "
                    + "lists it with its result: the certificate chain at the given instant (exactly credential "
                    + "certificate, intermediate, root), the nonce, the keyId, the rpIdHash, the signCount, the aaguid, "
                    + "the credentialId and the credential key. With --assertion, the assertion is "
                    + "verified with the attested key and a previous counter of 0. Exit 0 when every check passes, 1 "
                    + "otherwise. Bytes are base64 (standard or URL-safe, padded or not). --client-data is hashed with "
                    + "SHA-256 (the Firebase flow hashes the challenge); --client-data-hash is used as is (Apple's "
                    + "published sample passes raw bytes as the hash).",
                options: [
                    .value("--attestation", name: "B64", help: "The attestation object (CBOR), base64."),
                    .value("--key-id", name: "B64", help: "The keyId the app sent, base64."),
                    .value("--team", name: "TEAMID", help: "The Apple team identifier."),
                    .value("--bundle", name: "BUNDLE_ID", help: "The app's bundle identifier."),
                    .value(
                        "--client-data", name: "B64",
                        help: "The client data (challenge); its SHA-256 is the clientDataHash."),
                    .value("--client-data-hash", name: "B64", help: "The clientDataHash itself."),
                    .value(
                        "--env", name: "development|production",
                        help: "The App Attest environment the app is built for."),
                    .value(
                        "--at", name: "ISO8601",
                        help: "Verify as of this instant (default: now). Leaves live about 3 days."),
                    .value("--assertion", name: "B64", help: "An assertion (CBOR) to verify with the attested key."),
                    .value(
                        "--assertion-client-data", name: "B64",
                        help: "The assertion's client data; its SHA-256 is the clientDataHash."),
                    .flag(
                        "--trust-demo", help: "Also trust the store's demo certificate authority (simulated devices)."),
                    .flag("--json", help: "Print the checks as JSON."),
                ],
                examples: [
                    "rollout attest verify --attestation o2NmbXRv... --key-id VnfqjSp0... --team 8YE23NZS57 \\",
                    "    --bundle com.kayak.travel --client-data MTIzNDU2Nzg5MGFiY2RlZmdo --env production \\",
                    "    --at 2020-09-28T00:00:00Z --assertion omlzaWdu... --assertion-client-data MTIzNDU2Nzg5MGFiY2RlZmdo",
                    "rollout attest verify ... --client-data-hash dGVzdF9zZXJ2ZXJfY2hhbGxlbmdl --json",
                ],
                action: { try verifyAttestation($0) })
        ])

    static let token = Command(
        "token", summary: "Verify App Check tokens issued by this store's exchange.",
        subcommands: [
            Command(
                "verify", summary: "Verify an App Check token: signature, claims, expiry and (with --consume) replay.",
                discussion: "Checks the RS256 signature against the store's signing keys, then the claims (each "
                    + "one named when it is missing or out of range), the issuer and audience against the store's "
                    + "project, the subject against its registered apps, and the expiry. The segments must be "
                    + "base64url without padding; an unsigned or forged token is refused before its claims are read. With "
                    + "--consume the token is recorded as used, as Firebase's verifyAppCheckToken does; presenting it "
                    + "again fails the replay check. Exit 0 when every check passes, 1 otherwise.",
                options: [
                    .flag("--consume", help: "Consume the token (replay protection for limited-use tokens)."),
                    .value("--at", name: "ISO8601", help: "Verify as of this instant (default: now)."),
                    .flag("--json", help: "Print the checks as JSON."),
                ],
                positionals: [Positional("JWT", help: "The App Check token.")],
                examples: [
                    "rollout token verify eyJhbGciOiJSUzI1NiIs...", "rollout token verify \"$TOKEN\" --consume --json",
                ],
                action: { try verifyToken($0) })
        ])

    // MARK: attest verify

    static func verifyAttestation(_ inv: Invocation) throws -> ExitCode {
        func bytes(_ option: String) throws -> [UInt8]? {
            guard let text = inv.value(option) else { return nil }
            guard let b = Base64.decode(text), !b.isEmpty else { throw inv.usageError("\(option) is not base64") }
            return b
        }
        func required(_ option: String) throws -> String {
            guard let v = inv.value(option), !v.isEmpty else { throw inv.usageError("missing \(option)") }
            return v
        }
        guard let attestation = try bytes("--attestation") else { throw inv.usageError("missing --attestation") }
        guard let keyId = try bytes("--key-id") else { throw inv.usageError("missing --key-id") }
        let app = AppIdentity(teamId: try required("--team"), bundleId: try required("--bundle"))
        guard let environment = AppAttestEnvironment(rawValue: try required("--env")) else {
            throw inv.usageError("--env must be development or production")
        }
        let clientDataHash: [UInt8]
        switch (try bytes("--client-data"), try bytes("--client-data-hash")) {
        case (let data?, nil): clientDataHash = SHA256.hash(data)
        case (nil, let hash?): clientDataHash = hash
        case (nil, nil): throw inv.usageError("give --client-data or --client-data-hash")
        default: throw inv.usageError("give --client-data or --client-data-hash, not both")
        }
        let time = try instant(inv)
        let assertion = try bytes("--assertion")
        let assertionData = try bytes("--assertion-client-data")
        if (assertion == nil) != (assertionData == nil) {
            throw inv.usageError("--assertion and --assertion-client-data go together")
        }
        let trust: TrustAnchors
        if inv.flag("--trust-demo") {
            let state = try openState(inv).state
            guard let material = try state.demoAuthority(), let root = Certificate(der: material.rootCertificate) else {
                throw CommandError(
                    "the store holds no demo certificate authority (it is created with the first simulated fleet)")
            }
            trust = .apple(and: root)
        } else {
            trust = .apple
        }

        let report = AttestationVerifier(trust: trust).evaluate(
            attestation: attestation, keyId: keyId, clientDataHash: clientDataHash, app: app, environment: environment,
            at: time)
        var assertionReport: AssertionReport?
        if let assertion, let assertionData {
            if let key = report.value, let publicKey = P256PublicKey(uncompressedPoint: key.publicKey) {
                assertionReport = AssertionVerifier(app: app).evaluate(
                    assertion: assertion, clientDataHash: SHA256.hash(assertionData), publicKey: publicKey,
                    previousCounter: 0)
            }
        }
        let assertionSkipped = assertion != nil && assertionReport == nil
        let ok = report.passed && (assertion == nil || assertionReport?.passed == true)

        if inv.flag("--json") {
            var out = JSONObject([
                ("verified", .bool(ok)), ("at", .string(time.iso8601)), ("app", .string(app.appId)),
                ("environment", .string(environment.rawValue)),
                ("attestation", json(report.checks, error: report.failure)),
            ])
            if let key = report.value { out["publicKey"] = .string(Base64.encode(key.publicKey)) }
            if let assertionReport { out["assertion"] = json(assertionReport.checks, error: assertionReport.failure) }
            if assertionSkipped {
                out["assertion"] = ["checks": [], "error": "notRun", "detail": "the attestation did not verify"]
            }
            print(JSONWriter(style: .pretty).string(.object(out)))
        } else {
            print(
                "attestation of key \(Hex.encode(keyId)) for \(app.appId) (\(environment.rawValue)) at \(time.iso8601)")
            printChecks(report.checks)
            if let assertionReport {
                print("assertion (previous counter 0)")
                printChecks(assertionReport.checks)
            } else if assertionSkipped {
                print("assertion: not run, the attestation did not verify")
            }
            let failure =
                report.failure.map { "\($0.code): \($0)" } ?? assertionReport?.failure.map { "\($0.code): \($0)" }
            print(
                ok
                    ? "verified: every check passed"
                    : "rejected: \(StoreCommands.printable(failure ?? "the assertion was not verified"))")
        }
        return ok ? .ok : .failure
    }

    // MARK: token verify

    static func verifyToken(_ inv: Invocation) throws -> ExitCode {
        guard let jwt = inv.positional(0) else { throw inv.usageError("missing JWT") }
        let time = try instant(inv)
        let source = try openState(inv)
        let state = source.state
        // The connection would refuse the consumption anyway; refusing first gives the refusal its exit code (4).
        if inv.flag("--consume") { try source.refuseWritesIfReadOnly() }
        let verifier: AppCheckTokenVerifier
        do {
            verifier = try AppCheckTokenVerifier(state: state)
        } catch let e as AppCheckSetupError {
            throw CommandError("\(source.label): \(e.reason)")
        }
        let report =
            inv.flag("--consume")
            ? verifier.evaluate(jwt, at: time, consumingIn: state) : verifier.evaluate(jwt, at: time)
        if inv.flag("--json") {
            var out = JSONObject([
                ("verified", .bool(report.passed)), ("at", .string(time.iso8601)),
                ("token", json(report.checks, error: report.failure)),
            ])
            // A replayed token fails as a whole, but its claims are still worth showing.
            if let claims = report.value ?? verifier.evaluate(jwt, at: time).value {
                var c = JSONObject([
                    ("iss", .string(claims.issuer)), ("aud", .array(claims.audience.map { .string($0) })),
                    ("sub", .string(claims.subject)), ("iat", .number(JSONNumber(claims.issuedAt))),
                    ("exp", .number(JSONNumber(claims.expiresAt))),
                ])
                if let jti = claims.tokenId { c["jti"] = .string(jti) }
                out["claims"] = .object(c)
            }
            print(JSONWriter(style: .pretty).string(.object(out)))
        } else {
            print("App Check token at \(time.iso8601)")
            printChecks(report.checks)
            print(
                report.passed
                    ? "verified: every check passed"
                    : "rejected: \(StoreCommands.printable(report.failure.map { "\($0.code): \($0)" } ?? ""))")
        }
        return report.passed ? .ok : .failure
    }

    // MARK: shared

    static func instant(_ inv: Invocation) throws -> Instant {
        guard let text = inv.value("--at") else { return SystemClock().now() }
        guard let t = ISO8601.parse(text) else {
            throw inv.usageError("--at is not an ISO 8601 instant (e.g. 2020-09-28T00:00:00Z)")
        }
        return t
    }

    /// The App Check state of an existing store (a file, a PostgreSQL team store, or behind `firebase:PROJECT` its
    /// state store, through the session's port); an absent store is an error, not a new empty one. Under
    /// `--read-only` the connection refuses every write (a `--consume` then fails with exit 4, recording nothing).
    static func openState(_ inv: Invocation) throws -> AppCheckStateSource {
        let location = try StoreLocation.resolvedPath(inv)
        // A store file holding App Check state only (no version yet) is still the exchange's state: not a session.
        if try FirebaseWiring.project(of: location) != nil { return try Wiring.session(inv).appCheckState() }
        return try Wiring.appCheckState(
            location: location, readOnly: inv.flag("--read-only"), keyPath: Wiring.teamStoreKeyPath(inv.environment))
    }

    static func printChecks(_ checks: [CheckRecord]) {
        let width = (checks.map(\.title.count).max() ?? 0) + 2
        for c in checks {
            let mark =
                switch c.outcome {
                case .passed: "pass"
                case .failed: "FAIL"
                case .skipped: "skip"
                }
            let title = c.title.padded(to: width)
            // Details quote the attacker's bytes (a token's header, a certificate's fields): escaped for the terminal.
            print("  \(mark)  \(title)\(c.errorCode.map { "\($0): " } ?? "")\(StoreCommands.printable(c.detail))")
        }
    }

    static func json(_ checks: [CheckRecord], error: (any CodedError)?) -> JSONValue {
        let items = checks.map { c -> JSONValue in
            var o = JSONObject([
                ("name", .string(c.name)), ("result", .string(c.outcome.rawValue)), ("detail", .string(c.detail)),
            ])
            if let code = c.errorCode { o["error"] = .string(code) }
            return .object(o)
        }
        return .object(JSONObject([("checks", .array(items)), ("error", error.map { .string($0.code) } ?? .null)]))
    }
}
