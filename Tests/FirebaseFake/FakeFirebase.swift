import FirebaseRemoteConfig
import WebClient
import Foundation
import JSON
import RemoteConfig
import Rollout
import SQLiteStore
import TestSupport
import Timekeeping

/// The strict fake of Firebase (Tests/FirebaseFake/fake_remote_config.py) on a loopback port, with a throwaway
/// service account whose key only this test holds, and a state store beside it.
public final class FakeFirebase: @unchecked Sendable {
    public let directory: URL
    public let project = "demo-rollout"
    public let projectNumber = "123456789012"
    public let email = "rollout-ci@demo-rollout.iam.gserviceaccount.com"
    public let keyID: String
    /// The service-account key file (mode 0600).
    public let keyFile: String
    public let statePath: String
    /// What `rollout` gets as `--state`: `statePath` unless a test points it elsewhere (a PostgreSQL team store).
    public var stateLocation: String
    public let port: Int
    /// Served over HTTPS (`https://localhost:port`, certificates of a CA made for this fake); its controls then
    /// go over plain HTTP to `controlPort`.
    public let tls: Bool
    public let controlPort: Int
    /// The test CA's certificate when `tls`: what `CURL_CA_BUNDLE` (and `SSL_CERT_FILE`) name for the built binary.
    public var caFile: String { directory.appendingPathComponent("tls/ca.pem").path }
    private let process: Process
    private let input: Pipe

    public static let script = TestSupport.packageRoot.appendingPathComponent(
        "Tests/FirebaseFake/fake_remote_config.py"
    ).path

    /// Starts the fake holding `template` (JSON text) as version 1.
    public init(template: String? = nil, conflictForm: String = "400", tokenLifetime: Int = 3599, tls: Bool = false)
        throws
    {
        directory = try TestSupport.temporaryDirectory("rollout-firebase")
        self.tls = tls
        let python = try TestSupport.python()
        let privatePEM = directory.appendingPathComponent("sa.pem").path
        let publicPEM = directory.appendingPathComponent("sa.pub.pem").path
        let gen = try TestSupport.run(python, [Self.script, "keygen", privatePEM, publicPEM])
        guard gen.status == 0 else { throw TestSupport.Failure("keygen failed: \(gen.stderr)") }
        keyID = "kid-" + UUID().uuidString.prefix(8).lowercased()
        statePath = directory.appendingPathComponent("state.db").path
        stateLocation = statePath
        var args = [
            Self.script, "--project", project, "--project-number", projectNumber, "--client-email", email,
            "--public-key", publicPEM,
            "--key-id", keyID, "--conflict-form", conflictForm, "--token-lifetime", String(tokenLifetime),
        ]
        if tls {
            let certificates = directory.appendingPathComponent("tls").path
            try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
            let made = try TestSupport.run(python, [Self.script, "certs", certificates])
            guard made.status == 0 else { throw TestSupport.Failure("certs failed: \(made.stderr)") }
            args += ["--tls", certificates]
        }
        if let template {
            let path = directory.appendingPathComponent("initial.json").path
            try template.write(toFile: path, atomically: true, encoding: .utf8)
            args += ["--template", path]
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = args
        input = Pipe()
        let out = Pipe()
        for handle in [input.fileHandleForReading, input.fileHandleForWriting, out.fileHandleForReading, out.fileHandleForWriting] {
            TestSupport.keepPrivate(handle)
        }
        process.standardInput = input
        process.standardOutput = out
        try process.run()
        func readLine() throws -> String {
            var line: [UInt8] = []
            while true {
                let byte = out.fileHandleForReading.readData(ofLength: 1)
                guard let b = byte.first else { throw TestSupport.Failure("the fake exited before it was ready") }
                if b == 10 { return String(decoding: line, as: UTF8.self) }
                line.append(b)
            }
        }
        let text = try readLine()
        guard text.hasPrefix("PORT "), let p = Int(text.dropFirst(5)) else {
            throw TestSupport.Failure("the fake said \(text)")
        }
        port = p
        if tls {
            let control = try readLine()
            guard control.hasPrefix("CONTROL "), let c = Int(control.dropFirst(8)) else {
                throw TestSupport.Failure("the fake said \(control)")
            }
            controlPort = c
        } else {
            controlPort = p
        }
        let pem = try String(contentsOfFile: privatePEM, encoding: .utf8)
        let key: JSONValue = [
            "type": "service_account", "project_id": .string(project), "private_key_id": .string(keyID),
            "private_key": .string(pem),
            "client_email": .string(email), "client_id": "1234567890",
            "token_uri": .string((tls ? "https://localhost:\(port)" : "http://127.0.0.1:\(port)") + "/token"),
        ]
        keyFile = directory.appendingPathComponent("service-account.json").path
        try key.prettyText.write(toFile: keyFile, atomically: true, encoding: .utf8)
        chmod(keyFile, 0o600)
        chmod(privatePEM, 0o600)
    }

    deinit {
        try? input.fileHandleForWriting.close()
        TestSupport.stop(process)
        try? FileManager.default.removeItem(at: directory)
    }

    public var origin: String { tls ? "https://localhost:\(port)" : "http://127.0.0.1:\(port)" }

    /// The transport a test process uses to reach this fake (trusting its CA under `tls`).
    public var transport: CurlTransport { CurlTransport(caFile: tls ? caFile : nil) }

    /// Serves `name` (good, expired, otherhost, stranger) from the next TLS handshake on.
    public func serveCertificate(_ name: String) throws { try control("POST", "/_fake/tls", ["cert": .string(name)]) }

    // MARK: Controls

    @discardableResult
    public func control(_ method: String, _ path: String, _ body: JSONValue? = nil) throws -> JSONValue {
        let r = try CurlTransport().send(
            HTTPRequest(
                method: method, url: "http://127.0.0.1:\(controlPort)" + path, headers: [("Content-Type", "application/json")],
                body: body.map { Array($0.compactText.utf8) }, timeout: .seconds(Int64(10))))
        guard r.status == 200 else { throw TestSupport.Failure("fake control \(path): HTTP \(r.status)") }
        return try JSONParser().parse(r.body)
    }

    /// Arms a fault: `drop_before`, `drop_after`, `delay_before`, `delay_after`, `unavailable`, `unauthenticated`,
    /// ...; or a lie (a 200 that is wrong): `ok_unapplied`, `ok_misnumbered` (`value`: the version it names),
    /// `page_loop` (`value` "same": one token again and again).
    public func fault(_ name: String, match: String, count: Int = 1, seconds: Double = 0, value: String? = nil) throws {
        try control(
            "POST", "/_fake/faults",
            [
                "fault": .string(name), "match": .string(match), "count": .number(JSONNumber(count)),
                "seconds": .number(JSONNumber(seconds)), "value": value.map { .string($0) } ?? .null,
            ])
    }

    /// Arms a race: the next request of kind `match` finds `template` published by a colleague from the Firebase
    /// console (as bob@example.com) just before it is handled, and then meets the fault `then` (none when nil).
    public func colleaguePublishes(_ template: JSONValue, before match: String, then: String? = nil, seconds: Double = 0)
        throws
    {
        try control(
            "POST", "/_fake/faults",
            [
                "fault": "colleague_first", "match": .string(match), "count": 1, "template": template,
                "then": then.map { .string($0) } ?? .null, "seconds": .number(JSONNumber(seconds)),
            ])
    }

    /// Disarms every fault not yet reached.
    public func clearFaults() throws { try control("POST", "/_fake/faults/clear") }

    /// Every version the fake keeps, oldest first (each with its `version` object).
    public func versions() throws -> [JSONValue] { try control("GET", "/_fake/state")["versions"]?.arrayValue ?? [] }

    public func head() throws -> JSONValue { try versions().last! }

    public func headNumber() throws -> Int { Int(try head()["version"]!["versionNumber"]!.stringValue!)! }

    public func stats() throws -> JSONValue { try control("GET", "/_fake/stats") }

    public func stat(_ name: String) throws -> Int { Int(try stats()[name]?.numberValue?.int64 ?? -1) }

    /// A colleague publishing from the Firebase console.
    @discardableResult
    public func publishAsColleague(
        _ template: JSONValue, user: String = "bob@example.com", description: String = "console edit"
    ) throws -> Int {
        let r = try control(
            "POST", "/_fake/publish",
            ["template": template, "user": .string(user), "description": .string(description)])
        return Int(r["versionNumber"]!.stringValue!)!
    }

    // MARK: In-process store

    /// A Firebase store on this fake, with a short timeout and recorded (not slept) back-off unless `sleeps`.
    public func store(
        clock: any Clock = SystemClock(), timeout: Double = 5, sleeps: Bool = true, recorder: DelayRecorder? = nil,
        state given: (any FirebaseStateStore)? = nil
    ) throws -> FirebaseConfigStore {
        let state = try given ?? FirebaseState.open(path: statePath, project: project, create: true).configStore()
        let transport = self.transport
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: keyFile), transport: transport, clock: clock)
        var policy = RetryPolicy(attempts: 4, base: .milliseconds(20), cap: .milliseconds(200))
        policy.timeout = .seconds(timeout)
        let client = RemoteConfigClient(
            endpoint: try RemoteConfigEndpoint(origin: origin), project: project, tokens: tokens, transport: transport,
            policy: policy,
            sleep: { d in
                recorder?.record(d)
                if sleeps { usleep(UInt32(d.microseconds)) }
            })
        return FirebaseConfigStore(client: client, state: state, clock: clock)
    }

    // MARK: The binary

    public func environment(operator id: String) -> [String: String] {
        [
            "ROLLOUT_STORE": "firebase:\(project)", "ROLLOUT_FIREBASE_URL": origin, "FIREBASE_APPCHECK_URL": origin,
            "GOOGLE_APPLICATION_CREDENTIALS": keyFile,
            "ROLLOUT_OPERATOR": id, "NO_COLOR": "1", "HOME": directory.path,
            "XDG_STATE_HOME": directory.appendingPathComponent("xdg").path,
        ].merging(tls ? ["CURL_CA_BUNDLE": caFile, "SSL_CERT_FILE": caFile] : [:]) { a, _ in a }
    }

    /// Runs the built `rollout` against this fake (state store `stateLocation`).
    @discardableResult
    public func rollout(
        _ arguments: [String], operator id: String = "ana@example.com", environment extra: [String: String] = [:]
    ) throws
        -> TestSupport.ProcessResult
    {
        var env = environment(operator: id)
        for (k, v) in extra { env[k] = v }
        return try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + ["--state", stateLocation], environment: env)
    }

    public func json(_ arguments: [String]) throws -> JSONValue {
        let r = try rollout(arguments + ["--json"])
        guard r.status == 0 else { throw TestSupport.Failure("\(arguments) failed (\(r.status)): \(r.stderr)") }
        return try JSONParser().parse(r.stdout)
    }
}

/// Back-off delays asked for, in order.
public final class DelayRecorder: @unchecked Sendable {
    public init() {}
    private let lock = NSLock()
    private var list: [Instant.Duration] = []
    public func record(_ d: Instant.Duration) { lock.withLock { list.append(d) } }
    public var delays: [Instant.Duration] { lock.withLock { list } }
}

/// An existing Firebase template as a team has it: other conditions, parameters with conditional, rollout and
/// personalization values, parameter groups, and members rollout does not know.
public let existingTemplate = """
    {
      "conditions": [
        {"name": "ios_users", "expression": "device.os == 'ios'", "tagColor": "GREEN"},
        {"name": "beta_testers", "expression": "app.userProperty['beta'].exactlyOne(['yes']) && percent('beta-seed') between 0 and 20", "tagColor": "PURPLE", "futureConditionField": {"kept": true}}
      ],
      "parameters": {
        "welcome_message": {
          "defaultValue": {"value": "Welcome"},
          "conditionalValues": {"ios_users": {"value": "Welcome, iPhone"}},
          "description": "Greeting", "valueType": "STRING"
        },
        "new_checkout": {
          "defaultValue": {"value": "false"},
          "conditionalValues": {"ios_users": {"rolloutValue": {"rolloutId": "rollout_7", "value": "true", "percent": 35}}},
          "valueType": "BOOLEAN"
        },
        "recommendations": {
          "defaultValue": {"useInAppDefault": true},
          "conditionalValues": {"beta_testers": {"personalizationValue": {"personalizationId": "p13n_2"}}},
          "valueType": "JSON"
        }
      },
      "parameterGroups": {
        "checkout": {
          "description": "Checkout settings",
          "parameters": {"max_items": {"defaultValue": {"value": "25"}, "valueType": "NUMBER"}}
        }
      },
      "someFutureTopLevelField": {"nested": [1, 2, {"x": "y"}]}
    }
    """
