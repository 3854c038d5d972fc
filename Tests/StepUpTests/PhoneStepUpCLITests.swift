import Crypto
import Foundation
import PhoneVerification
import PostgresStore
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import StoreSupport
import StepUp
import Testing
import TestSupport
import Timekeeping

/// Step-up by a code sent to the operator's phone, through the built binary against the strict Verify v2 fake
/// (Tests/PhoneVerificationTests/fake_verify.py): enrolment (the number sealed), SMS then voice, wrong codes up to
/// the provider's 410 and the phone method's own lockout (a one-time code still works), the provider's 409, 422
/// and 429 refused with nothing published, and no code in any output or in the store. Each runs on an SQLite store
/// file and on a PostgreSQL team store (a real server, `PostgresServer`).
@Suite("Phone step-up through the binary against the Verify v2 fake")
struct PhoneStepUpCLITests {
    enum Backend: String, CaseIterable, Sendable { case sqlite, postgresql }

    /// A store of either backend, driven through the binary under faketime (like `OperatorCLITests.Session`).
    final class Store {
        let backend: Backend
        let directory: URL
        /// `--store`: the file's path, or the database's URI.
        let location: String
        /// `location`, as `OperatorCLITests.Session` names it.
        var store: String { location }
        /// The team store key (PostgreSQL).
        let keyFile: String?
        var outputs: [String] = []

        init(_ backend: Backend) throws {
            self.backend = backend
            directory = try TestSupport.temporaryDirectory("phone-stepup-\(backend)")
            switch backend {
            case .sqlite:
                location = directory.appendingPathComponent("rollout.db").path
                keyFile = nil
            case .postgresql:
                let server = try PostgresServer.get()
                location = server.uris(of: try server.freshDatabase()).socket
                keyFile = directory.appendingPathComponent("team.key").path
            }
            let created = try run(["init"], at: Instant(seconds: OperatorCLITests.t0.seconds - 60))
            guard created.status == 0 else { throw TestSupport.Failure("init failed: \(created.stderr)") }
        }

        /// A PostgreSQL store made elsewhere (`store copy`), with its team key.
        init(adopting location: String, keyFile: String) throws {
            backend = .postgresql
            directory = try TestSupport.temporaryDirectory("phone-stepup-adopted")
            self.location = location
            self.keyFile = keyFile
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        var environment: [String: String] {
            var env = ["TZ": "UTC", "NO_COLOR": "", "ROLLOUT_OPERATOR": "nobody"]
            if let keyFile { env["ROLLOUT_STORE_KEY"] = keyFile }
            return env
        }

        @discardableResult
        func run(_ arguments: [String], at time: Instant, stdin: String? = nil, environment extra: [String: String] = [:])
            throws -> TestSupport.ProcessResult
        {
            let stamp = time.iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            let result = try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", location],
                stdin: stdin, environment: environment.merging(extra, uniquingKeysWith: { $1 }), fakeTime: "@\(stamp)")
            outputs.append(result.stdout + result.stderr)
            return result
        }

        /// Starts and confirms the enrolment of `id` at `time`; returns the secret read from the printed URI.
        func enrol(_ id: String, at time: Instant) throws -> TOTPSecret {
            let started = try run(["operator", "enroll", "--operator", id], at: time)
            try #require(started.status == 0, "\(started.stderr)")
            let secret = try #require(OperatorCLITests.Session.secret(in: started.stdout))
            let confirmed = try run(
                ["operator", "enroll", "--operator", id, "--code", "-"], at: time,
                stdin: TOTP.standard.code(secret: secret, at: time) + "\n")
            try #require(confirmed.status == 0, "\(confirmed.stderr)")
            return secret
        }

        func configStore() throws -> any ConfigStore {
            switch backend {
            case .sqlite: try RolloutStore(path: location, create: false).configStore()
            case .postgresql: try PostgresConfigStore(conninfo: location)
            }
        }

        /// The store's audit log, oldest first.
        func audit() throws -> [AuditEntry] {
            let records: [AuditRecord] =
                switch backend {
                case .sqlite: try RolloutStore(path: location, create: false).configStore().auditRecords(limit: 1000, before: nil)
                case .postgresql: try PostgresConfigStore(conninfo: location).auditRecords(limit: 1000, before: nil)
                }
            return records.reversed().map(\.entry)
        }

        func version() throws -> Int { try configStore().current().info.number }

        /// Everything the store keeps as text: the file's bytes, or every row of the phone and audit tables.
        func rawText() throws -> String {
            switch backend {
            case .sqlite:
                return String(decoding: try Data(contentsOf: URL(fileURLWithPath: location)), as: UTF8.self)
            case .postgresql:
                let c = try PGConnection(location)
                return try ["stepup_phones", "config_audit", "config_versions"].flatMap { table in
                    try c.query("SELECT t::text FROM \(table) t").map { $0.first.flatMap { $0 } ?? "" }
                }.joined(separator: "\n")
            }
        }

        /// The step-up policy's write path on this store, at `clock` (in this process: no provider port).
        func writePath(acting actor: String, clock: ManualClock) throws -> WritePath {
            switch backend {
            case .sqlite:
                let store = try RolloutStore(path: location, create: false)
                return WritePath(
                    store: try store.configStore(), clock: clock, policies: [try StepUpWritePolicy(store: store, clock: clock)],
                    newSeed: { "rollout-0000abcd" })
            case .postgresql:
                let team = try Wiring.teamSession(conninfo: location, operatorID: actor, clock: clock, keyPath: try #require(keyFile))
                let path = try team.writePath()
                let stepUp = try #require(path.policies.lazy.compactMap { $0 as? StepUpWritePolicy }.first)
                return path.replacingStepUp(with: stepUp)
            }
        }
    }

    static let t0 = OperatorCLITests.t0
    static let number = "+447700900123"
    static let ana = ["--operator", "ana@laptop"]
    static func at(_ seconds: Int64) -> Instant { Instant(seconds: t0.seconds + seconds) }

    /// The fake on a loopback port; what reaches the phone is read from its outbox.
    final class Fake {
        let directory: URL
        let process: Process
        let input: Pipe
        let port: Int
        let outbox: String
        let credentials: String

        init(rateLimit: Int = 100) throws {
            directory = try TestSupport.temporaryDirectory("phone-stepup-fake")
            outbox = directory.appendingPathComponent("outbox.ndjson").path
            credentials = directory.appendingPathComponent("vonage.json").path
            guard FileManager.default.createFile(atPath: outbox, contents: nil),
                FileManager.default.createFile(
                    atPath: credentials, contents: Data(#"{"api_key": "k3y", "api_secret": "s3cret"}"#.utf8),
                    attributes: [.posixPermissions: 0o600])
            else { throw TestSupport.Failure("cannot create the fake's files") }
            let script = TestSupport.packageRoot.appendingPathComponent("Tests/PhoneVerificationTests/fake_verify.py").path
            (process, input, port) = try TestSupport.startFake(
                script, ["--key", "k3y", "--secret", "s3cret", "--outbox", outbox, "--rate-limit", String(rateLimit)])
        }

        deinit {
            try? input.fileHandleForWriting.close()
            TestSupport.stop(process)
            try? FileManager.default.removeItem(at: directory)
        }

        /// Ends verification `id` at the fake now, as if its last channel had timed out (a control call: no sleep).
        func expire(_ id: String) throws {
            let r = try TestSupport.run("/usr/bin/curl", ["-sf", "-X", "POST", "http://127.0.0.1:\(port)/_control/expire/\(id)"])
            guard r.status == 0 else { throw TestSupport.Failure("the fake did not expire \(id): \(r.stderr)") }
        }

        /// Makes the fake's next code checks wait for `release()` before answering (a control call).
        func hold() throws { try control("POST", "hold") }
        func release() throws { try control("POST", "release") }

        /// Waits (at most 20 s) until a code check is waiting at the fake.
        func waitForAHeldCheck() throws {
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                let r = try TestSupport.run("/usr/bin/curl", ["-sf", "http://127.0.0.1:\(port)/_control/held"])
                if r.status == 0, !r.stdout.contains("\"held\": 0") { return }
                usleep(20_000)
            }
            throw TestSupport.Failure("no code check reached the fake within 20 s")
        }

        private func control(_ method: String, _ name: String) throws {
            let r = try TestSupport.run("/usr/bin/curl", ["-sf", "-X", method, "http://127.0.0.1:\(port)/_control/\(name)"])
            guard r.status == 0 else { throw TestSupport.Failure("the fake refused \(name): \(r.stderr)") }
        }

        /// The request ids the fake sent codes for, oldest first.
        func requestIDs() throws -> [String] {
            let text = try String(contentsOfFile: outbox, encoding: .utf8)
            return try text.split(separator: "\n").map { line in
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
                return object["request_id"] ?? ""
            }
        }

        var environment: [String: String] {
            ["ROLLOUT_VONAGE_CREDENTIALS": credentials, "ROLLOUT_VONAGE_URL": "http://127.0.0.1:\(port)"]
        }

        /// What reached the phone, oldest first.
        func messages() throws -> [(channel: String, to: String, code: String)] {
            let text = try String(contentsOfFile: outbox, encoding: .utf8)
            return try text.split(separator: "\n").map { line in
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
                return (object["channel"] ?? "", object["to"] ?? "", object["code"] ?? "")
            }
        }

        /// Waits (at most 20 s) until the outbox holds more than `count` messages; returns the newest.
        func message(after count: Int) throws -> (channel: String, to: String, code: String) {
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                let all = try messages()
                if all.count > count { return all[count] }
                usleep(20_000)
            }
            throw TestSupport.Failure("no message reached the phone within 20 s")
        }
    }

    /// The binary under faketime with a stdin the test writes to while it runs (the code is known only once the
    /// fake has sent it).
    final class Running {
        let process = Process()
        let input = Pipe()
        let output = Pipe()
        let error = Pipe()

        convenience init(_ arguments: [String], store: Store, at time: Instant, environment: [String: String]) throws {
            try self.init(
                arguments, store: store.location, at: time,
                environment: store.environment.merging(environment, uniquingKeysWith: { $1 }))
        }

        init(_ arguments: [String], store: String, at time: Instant, environment: [String: String]) throws {
            let stamp = time.iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            process.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
            process.arguments = arguments + ["--store", store]
            var env = ProcessInfo.processInfo.environment
            for (k, v) in ["TZ": "UTC", "NO_COLOR": "", "ROLLOUT_OPERATOR": "nobody"].merging(environment, uniquingKeysWith: { $1 })
                .merging(TestSupport.fakeTime("@\(stamp)"), uniquingKeysWith: { $1 })
            {
                env[k] = v
            }
            process.environment = env
            process.standardInput = input
            process.standardOutput = output
            process.standardError = error
            try process.run()
        }

        func type(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

        func finish() throws -> (status: Int32, stdout: String, stderr: String) {
            try? input.fileHandleForWriting.close()
            let out = output.fileHandleForReading.readDataToEndOfFile()
            let err = error.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
        }
    }

    /// A store with ana enrolled (TOTP at t0, phone at t0 + 30 s).
    static func enrolled(_ fake: Fake, _ backend: Backend = .sqlite) throws -> (Store, TOTPSecret) {
        let s = try Store(backend)
        let secret = try s.enrol("ana@laptop", at: t0)
        let t1 = at(30)
        let enrolled = try s.run(
            ["operator", "enroll", "--method", "phone", "--phone", number, "--code", OperatorCLITests.code(secret, t1)] + ana,
            at: t1)
        try #require(enrolled.status == 0, "\(enrolled.stderr)")
        #expect(enrolled.stdout.contains("enrolled phone +44••••••0123 for ana@laptop"), "\(enrolled.stdout)")
        return (s, secret)
    }

    static func version(_ s: Store) throws -> Int { try s.version() }

    static func version(_ s: OperatorCLITests.Session) throws -> Int {
        try RolloutStore(path: s.store, create: false).configStore().current().info.number
    }

    /// The phone-method step-up records, oldest first.
    static func phoneRecords(_ s: Store) throws -> [AuditEntry] {
        try s.audit().filter { $0.action.hasPrefix("step-up ") && $0.detail.contains("method phone") }
    }

    /// Every code the fake sent appears in no output, no audit record and not in the store file's bytes (as a
    /// whole word: six digits may occur inside a hash or a time).
    static func expectNoCode(_ fake: Fake, _ outputs: [String], _ s: Store) throws {
        let codes = Set(try fake.messages().map(\.code))
        #expect(!codes.isEmpty)
        let audit = try s.audit().map { "\($0.action) \($0.from) \($0.to) \($0.detail) \($0.reason)" }
        let file = try s.rawText()
        for code in codes {
            for text in outputs + s.outputs + audit + [file] {
                #expect(!containsWord(code, in: text), "the code \(code) appears in: \(text.prefix(200))")
            }
        }
    }

    /// `word` occurs in `text` with no letter or digit right before or after it.
    static func containsWord(_ word: String, in text: String) -> Bool {
        let chars = Array(text.unicodeScalars)
        let needle = Array(word.unicodeScalars)
        guard needle.count <= chars.count else { return false }
        func isWordChar(_ i: Int) -> Bool {
            i >= 0 && i < chars.count && chars[i].isASCII && chars[i].properties.isAlphabetic || (i >= 0 && i < chars.count && ("0"..."9").contains(chars[i]))
        }
        for start in 0...(chars.count - needle.count) where Array(chars[start..<(start + needle.count)]) == needle {
            if !isWordChar(start - 1) && !isWordChar(start + needle.count) { return true }
        }
        return false
    }

    @Test(arguments: Backend.allCases) func enrolThenPublishWithTheCodeSentBySMSThenByVoice(_ backend: Backend) throws {
        let fake = try Fake()
        let (s, _) = try Self.enrolled(fake, backend)
        // The number is stored sealed; the audit shows it masked.
        let raw = try s.rawText()
        #expect(!raw.contains("447700900123") && !raw.contains(Hex.encode(Array("447700900123".utf8))))
        #expect(backend == .sqlite || raw.contains("(ana@laptop,"), "the PostgreSQL store holds the phone's row")
        #expect(try s.audit().contains { $0.action == "operator enroll phone" && $0.to == "+44••••••0123" })

        // Credentials others may read are refused before anything is sent.
        let t2 = Self.at(60)
        chmod(fake.credentials, 0o644)
        let loose = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t2, environment: fake.environment
        ).finish()
        #expect(loose.status != 0 && loose.stderr.contains("chmod 600"), "\(loose.stderr)")
        #expect(try fake.messages().isEmpty)
        chmod(fake.credentials, 0o600)

        let run = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t2, environment: fake.environment)
        let sms = try fake.message(after: 0)
        #expect(sms.channel == "sms" && sms.to == "447700900123")
        run.type("call")
        let voice = try fake.message(after: 1)
        #expect(voice.channel == "voice" && voice.code == sms.code)
        run.type(voice.code)
        let done = try run.finish()
        #expect(done.status == 0, "\(done.stderr)")
        #expect(done.stdout.contains("published version 2"), "\(done.stdout)")
        #expect(done.stderr.contains("a code by SMS to +44••••••0123"), "\(done.stderr)")
        #expect(done.stderr.contains("provider: calling +44••••••0123"), "\(done.stderr)")
        #expect(done.stderr.contains("provider: code accepted"), "\(done.stderr)")
        #expect(try Self.version(s) == 2)
        let records = try Self.phoneRecords(s)
        #expect(records.count == 1 && records[0].result == .stepUpAccepted && records[0].detail.contains("needed for "))
        // The sealed phone table is in the seal: the store verifies.
        let verify = try s.run(["audit", "verify"], at: t2)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        try Self.expectNoCode(fake, [loose.stdout, loose.stderr, done.stdout, done.stderr], s)
    }

    @Test(arguments: Backend.allCases) func wrongCodesEndWith410AndLockOnlyThePhoneMethod(_ backend: Backend) throws {
        let fake = try Fake()
        let (s, secret) = try Self.enrolled(fake, backend)
        let t2 = Self.at(60)
        let run = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t2, environment: fake.environment)
        let sms = try fake.message(after: 0)
        let wrong = ["111111", "222222", "333333", "444444"].filter { $0 != sms.code }.prefix(3)
        for code in wrong { run.type(code) }
        let done = try run.finish()
        #expect(done.status == 4, "\(done.stderr)")
        #expect(done.stderr.contains("provider: wrong code (400)"), "\(done.stderr)")
        #expect(done.stderr.contains("provider: too many wrong codes (410)"), "\(done.stderr)")
        #expect(done.stderr.contains("phone method is locked until"), "\(done.stderr)")
        #expect(done.stdout.isEmpty)
        #expect(try Self.version(s) == 1)
        let results = try Self.phoneRecords(s).map { String($0.detail.split(separator: ";")[0]) }
        #expect(results == ["result wrong-code", "result wrong-code", "result too-many-attempts"])
        #expect(try Self.phoneRecords(s).last?.detail.contains("locked-until") == true)

        // Locked: refused and audited without sending anything.
        let t3 = Self.at(90)
        let locked = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t3, environment: fake.environment
        ).finish()
        #expect(locked.status == 4 && locked.stderr.contains("locked until"), "\(locked.stderr)")
        #expect(try fake.messages().count == 1)
        #expect(try Self.phoneRecords(s).last.map { $0.detail.hasPrefix("result locked-out") } == true)
        #expect(try Self.version(s) == 1)

        // The other methods are not locked: a one-time code publishes.
        let totp = try s.run(
            ["set", "100", "--reason", "all in", "--code", OperatorCLITests.code(secret, t3)] + Self.ana, at: t3)
        #expect(totp.status == 0, "\(totp.stderr)")
        #expect(try Self.version(s) == 2)
        try Self.expectNoCode(fake, [done.stdout, done.stderr, locked.stdout, locked.stderr], s)
    }

    @Test(arguments: Backend.allCases) func providerRefusalsPublishNothing(_ backend: Backend) throws {
        let fake = try Fake(rateLimit: 2)
        let (s, _) = try Self.enrolled(fake, backend)
        let t2 = Self.at(60)
        let args = ["set", "100", "--reason", "all in", "--phone"] + Self.ana
        // A verification to the number is in progress: 409.
        let first = try Running(args, store: s, at: t2, environment: fake.environment)
        _ = try fake.message(after: 0)
        let concurrent = try Running(args, store: s, at: t2, environment: fake.environment).finish()
        #expect(concurrent.status == 4, "\(concurrent.stderr)")
        #expect(concurrent.stderr.contains("a verification to this number is in progress"), "\(concurrent.stderr)")
        // A code the provider cannot take: 422 names the parameter.
        first.type("12")
        let invalid = try first.finish()
        #expect(invalid.status == 4, "\(invalid.stderr)")
        #expect(invalid.stderr.contains("invalid parameters: code"), "\(invalid.stderr)")
        // Over the rate limit (two starts a minute): 429.
        let limited = try Running(args, store: s, at: t2, environment: fake.environment).finish()
        #expect(limited.status == 4, "\(limited.stderr)")
        #expect(limited.stderr.contains("rate limit reached"), "\(limited.stderr)")

        #expect(try Self.version(s) == 1)
        let records = try Self.phoneRecords(s)
        #expect(records.count == 3 && records.allSatisfy { $0.detail.hasPrefix("result provider-refused") })
        try Self.expectNoCode(
            fake, [concurrent.stdout, concurrent.stderr, invalid.stdout, invalid.stderr, limited.stdout, limited.stderr], s)
    }

    /// The provider's address follows the rule of every endpoint a client calls: plain http only to loopback.
    @Test func aProviderOverPlainHTTPOffLoopbackIsRefused() throws {
        let fake = try Fake()
        let (s, _) = try Self.enrolled(fake)
        var environment = fake.environment
        environment["ROLLOUT_VONAGE_URL"] = "http://verify.example.com"
        let r = try s.run(["set", "100", "--reason", "all in", "--phone"] + Self.ana, at: Self.at(60), environment: environment)
        #expect(r.status != 0, "\(r.stderr)")
        #expect(r.stderr.contains("uses plain http to a non-loopback host"), "\(r.stderr)")
        #expect(try fake.messages().isEmpty)
        #expect(try Self.version(s) == 1)
    }

    /// Ctrl-C at the hidden code prompt, on a real terminal: the terminal gets its echo back, the verification is
    /// cancelled at the provider and the refusal audited, nothing is published, and the command ends with 130.
    @Test func ctrlCAtTheCodePromptRestoresTheTerminalAndCancels() throws {
        let fake = try Fake()
        let (s, _) = try Self.enrolled(fake)
        let stamp = Self.at(60).iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
        // libfaketime preloaded rather than the faketime wrapper: the terminal's Ctrl-C goes to the whole foreground
        // group, and the wrapper would die of it before the command it waits for.
        let script = """
            import json, os, pty, select, sys, termios, time
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.argv[1], sys.argv[1:])
            def read_until(marker, seconds):
                got, end = b'', time.time() + seconds
                while time.time() < end and (marker is None or marker not in got):
                    r, _, _ = select.select([fd], [], [], 0.2)
                    if r:
                        try:
                            chunk = os.read(fd, 4096)
                        except OSError:
                            break
                        if not chunk:
                            break
                        got += chunk
                return got
            shown = read_until(b'Code sent', 30)
            echo_during = bool(termios.tcgetattr(fd)[3] & termios.ECHO)
            os.write(fd, bytes([3]))
            rest = read_until(None, 30)
            end = time.time() + 30
            done, status = os.waitpid(pid, os.WNOHANG)
            while done == 0 and time.time() < end:
                time.sleep(0.05)
                done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                os.kill(pid, 9)
                _, status = os.waitpid(pid, 0)
            echo_after = bool(termios.tcgetattr(fd)[3] & termios.ECHO)
            print(json.dumps({'prompted': b'Code sent' in shown, 'echo_during': echo_during, 'echo_after': echo_after,
                              'exit': os.waitstatus_to_exitcode(status), 'output': (shown + rest).decode('utf-8', 'replace')}))
            """
        var environment = s.environment.merging(fake.environment, uniquingKeysWith: { $1 })
        environment.merge(TestSupport.fakeTime("@\(stamp)"), uniquingKeysWith: { $1 })
        let r = try TestSupport.run(
            try TestSupport.python(),
            ["-c", script, try TestSupport.rolloutBinary(), "set", "100", "--reason", "all in", "--phone"] + Self.ana
                + ["--store", s.location],
            environment: environment)
        let result = try #require(
            try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "\(r.stdout) \(r.stderr)")
        #expect(result["prompted"] as? Bool == true, "\(result)")
        #expect(result["echo_during"] as? Bool == false, "\(result)")
        #expect(result["echo_after"] as? Bool == true, "\(result)")
        #expect(result["exit"] as? Int == 130, "\(result)")
        #expect((result["output"] as? String)?.contains("cancelled") == true, "\(result)")
        #expect(try Self.version(s) == 1)
        let records = try Self.phoneRecords(s).map(\.detail)
        #expect(records.count == 1 && records.last?.hasSuffix("no code was entered; the verification was cancelled") == true, "\(records)")
    }

    @Test(arguments: Backend.allCases) func anExpiredVerificationIsRefusedAndPublishesNothing(_ backend: Backend) throws {
        let fake = try Fake()
        let (s, _) = try Self.enrolled(fake, backend)
        let t2 = Self.at(60)
        let run = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t2, environment: fake.environment)
        let sms = try fake.message(after: 0)
        // The verification's time runs out at the provider before the code is typed.
        try fake.expire(try #require(try fake.requestIDs().first))
        run.type(sms.code)
        let done = try run.finish()
        #expect(done.status == 4, "\(done.stderr)")
        #expect(done.stderr.contains("expired or ended at the provider (404)"), "\(done.stderr)")
        #expect(done.stdout.isEmpty)
        #expect(try Self.version(s) == 1)
        let records = try Self.phoneRecords(s)
        #expect(records.count == 1 && records[0].result == .stepUpRefused && records[0].detail.hasPrefix("result expired"))
        // An expired verification counts no wrong attempt: the phone method is not locked.
        #expect(!(records[0].detail.contains("failed-attempts")))
        try Self.expectNoCode(fake, [done.stdout, done.stderr], s)
    }

    /// The provider is asked before the write path's transaction, not inside it: while the provider takes its time
    /// over a code, the store stays writable (another change lands), and the change the code was sent for, whose
    /// base has moved meanwhile, is refused instead of published over it. Before, the check ran under the SQLite
    /// write lock or the PostgreSQL head lock: the other change waited for the provider and this one published first.
    @Test(arguments: Backend.allCases) func theStoreStaysWritableWhileTheProviderChecksACode(_ backend: Backend) throws {
        let fake = try Fake()
        let (s, secret) = try Self.enrolled(fake, backend)
        let t2 = Self.at(60)
        let run = try Running(
            ["set", "100", "--reason", "all in", "--phone"] + Self.ana, store: s, at: t2, environment: fake.environment)
        let sms = try fake.message(after: 0)
        try fake.hold()
        run.type(sms.code)
        try fake.waitForAHeldCheck()
        // Another change (confirmed by a one-time code) while the provider holds its answer.
        let other = try s.run(
            ["set", "10", "--reason", "meanwhile", "--code", OperatorCLITests.code(secret, t2)] + Self.ana, at: t2)
        try fake.release()
        #expect(other.status == 0, "\(other.stderr)")
        #expect(try Self.version(s) == 2, "the other change landed while the provider was checking the code")
        let done = try run.finish()
        #expect(done.status == 4, "\(done.stdout) \(done.stderr)")
        #expect(done.stderr.contains("was not started by this session for this change"), "\(done.stderr)")
        #expect(try Self.version(s) == 2)
        let records = try Self.phoneRecords(s)
        #expect(records.count == 1 && records[0].result == .stepUpRefused && records[0].detail.hasPrefix("result not-started-here"))
        try Self.expectNoCode(fake, [done.stdout, done.stderr, other.stdout, other.stderr], s)
    }

    /// A request cannot bring its own phone outcome: the write path's step-up policy checks the code by the
    /// provider itself, and only for a verification its port started for this phone and this change.
    @Test(arguments: Backend.allCases) func aPhoneApprovalTheWritePathDidNotStartIsRefused(_ backend: Backend) throws {
        let fake = try Fake()
        let (s, _) = try Self.enrolled(fake, backend)
        let clock = ManualClock(Self.at(60))
        let path = try s.writePath(acting: "ana@laptop", clock: clock)
        let policy = try #require(path.policies.lazy.compactMap { $0 as? StepUpWritePolicy }.first)
        let client = VonageVerifyClient(
            credentials: VonageCredentials(key: "k3y", secret: "s3cret"), base: "http://127.0.0.1:\(fake.port)")
        let codes = VonagePhoneCodes(client: client)
        let wired = path.replacingStepUp(with: policy.checkingPhoneCodes(with: codes))
        func request(_ percent: Int64) -> WritePath.Request {
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: percent))), actor: "ana@laptop", reason: "all in", origin: "test")
        }
        func expectRefused(_ p: WritePath, _ r: WritePath.Request) {
            do {
                _ = try p.execute(r)
                Issue.record("published with \(r.phoneApproval.map(\.description) ?? "-")")
            } catch let failure as WritePath.Failure {
                guard case .refused(let refusal) = failure else { Issue.record("\(failure)"); return }
                #expect(refusal.policy == "step-up")
            } catch {
                Issue.record("\(error)")
            }
        }

        // A verification started outside the write path (anyone with the API credentials), with its right code.
        let outside = try client.start(number: "447700900123")
        var forged = request(100)
        forged.phoneApproval = PhoneApproval(verification: outside, submission: .code(try fake.message(after: 0).code))
        expectRefused(path, forged)  // no phone port at all
        expectRefused(wired, forged)  // a port that did not start it
        #expect(codes.lastOutcome(outside) == .notStartedHere)
        // The provider was never asked: the outside verification is still open, so cancelling it works.
        try client.cancel(outside)

        // A verification the port started for another change (50%), its right code offered for 100%.
        let fifty = try wired.preview(request(50)).proposal
        #expect(try !policy.stepUpReasons(for: fifty).isEmpty)
        let id = try codes.start(number: Self.number, binding: policy.phoneBinding(for: fifty))
        var swapped = request(100)
        swapped.phoneApproval = PhoneApproval(verification: id, submission: .code(try fake.message(after: 1).code))
        expectRefused(wired, swapped)
        #expect(codes.lastOutcome(id) == .notStartedHere)
        #expect(try Self.version(s) == 1)

        // The same code for the change it was started for publishes.
        var right = request(50)
        right.phoneApproval = swapped.phoneApproval
        guard case .published = try wired.execute(right) else { Issue.record("not published"); return }
        #expect(try Self.version(s) == 2)
        let results = try Self.phoneRecords(s).map { String($0.detail.split(separator: ";")[0]) }
        #expect(results == ["result no-provider", "result not-started-here", "result not-started-here", "result accepted"])
        try Self.expectNoCode(fake, [], s)
    }
}
