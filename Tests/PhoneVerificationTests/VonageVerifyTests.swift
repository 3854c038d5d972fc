import Foundation
import PhoneVerification
import Testing
import TestSupport
import WebClient

/// The Verify v2 client against the strict fake (fake_verify.py, written from Vonage's public reference) through
/// the real libcurl transport: the flows a phone step-up goes through, and no code in any error.
@Suite("Phone verification: the Vonage Verify v2 client against its strict fake")
struct VonageVerifyTests {
    final class Fake {
        let directory: URL
        let process: Process
        let input: Pipe
        let port: Int
        let outbox: String

        init(rateLimit: Int = 100) throws {
            directory = try TestSupport.temporaryDirectory("vonage-fake")
            outbox = directory.appendingPathComponent("outbox.ndjson").path
            guard FileManager.default.createFile(atPath: outbox, contents: nil) else {
                throw TestSupport.Failure("cannot create \(outbox)")
            }
            let script = TestSupport.packageRoot.appendingPathComponent("Tests/PhoneVerificationTests/fake_verify.py").path
            (process, input, port) = try TestSupport.startFake(
                script, ["--key", "k3y", "--secret", "s3cret", "--outbox", outbox, "--rate-limit", String(rateLimit)])
        }

        deinit {
            try? input.fileHandleForWriting.close()
            TestSupport.stop(process)
            try? FileManager.default.removeItem(at: directory)
        }

        func client(secret: String = "s3cret") -> VonageVerifyClient {
            VonageVerifyClient(
                credentials: VonageCredentials(key: "k3y", secret: secret), base: "http://127.0.0.1:\(port)")
        }

        /// Moves the fake's clock forward (a control call: the test never sleeps); returns nothing.
        func advance(_ seconds: Int) throws {
            let r = try TestSupport.run(
                "/usr/bin/curl",
                ["-sf", "-X", "POST", "-H", "Content-Type: application/json", "-d", "{\"advance\": \(seconds)}",
                    "http://127.0.0.1:\(port)/_control/clock"])
            guard r.status == 0 else { throw TestSupport.Failure("the fake's clock did not move: \(r.stderr)") }
        }

        /// Ends request `id` now, as if its last channel had timed out.
        func expire(_ id: String) throws {
            let r = try TestSupport.run("/usr/bin/curl", ["-sf", "-X", "POST", "http://127.0.0.1:\(port)/_control/expire/\(id)"])
            guard r.status == 0 else { throw TestSupport.Failure("the fake did not expire \(id): \(r.stderr)") }
        }

        /// What reached the phone: (channel, code) per message, oldest first.
        func messages() throws -> [(channel: String, to: String, code: String)] {
            try String(contentsOfFile: outbox, encoding: .utf8).split(separator: "\n").map {
                let o = try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: String]
                return (o["channel"]!, o["to"]!, o["code"]!)
            }
        }
    }

    /// Answers each request with the next scripted answer, and keeps the requests.
    final class Scripted: HTTPTransport, @unchecked Sendable {
        var answers: [(Int, String)]
        var requests: [HTTPRequest] = []
        init(_ answers: [(Int, String)]) { self.answers = answers }
        func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
            requests.append(request)
            let (status, body) = answers.removeFirst()
            return HTTPResponse(status: status, headers: [:], body: Array(body.utf8))
        }
    }

    @Test("A lying provider: a request id that is not a UUID is never put in a path, and a 200 about another verification is not a check passed")
    func lyingProvider() throws {
        let credentials = VonageCredentials(key: "k", secret: "s")
        let base = "http://127.0.0.1:9"
        let crafted = Scripted([(202, #"{"request_id":"abc/../../x?y=1"}"#)])
        #expect(throws: PhoneVerificationError.self) {
            try VonageVerifyClient(credentials: credentials, base: base, transport: crafted).start(number: "447700900000")
        }
        let id = "0b7e6f4e-9b4a-4d47-8f4e-3c1a2b3c4d5e"
        let other = Scripted([(200, #"{"request_id":"99999999-9b4a-4d47-8f4e-3c1a2b3c4d5e","status":"completed"}"#)])
        #expect(throws: PhoneVerificationError.self) {
            try VonageVerifyClient(credentials: credentials, base: base, transport: other).check(id, code: "000000")
        }
        let honest = Scripted([(200, #"{"request_id":"\#(id)","status":"completed"}"#)])
        #expect(try VonageVerifyClient(credentials: credentials, base: base, transport: honest).check(id, code: "123456") == .verified)
        #expect(honest.requests.map(\.url) == [base + "/v2/verify/" + id])
        let nothing = Scripted([])
        #expect(throws: PhoneVerificationError.self) {
            try VonageVerifyClient(credentials: credentials, base: base, transport: nothing).cancel("../x")
        }
        #expect(nothing.requests.isEmpty)
    }

    @Test("SMS first, then the voice call as fallback; the right code completes it")
    func smsThenVoice() throws {
        let fake = try Fake()
        let client = fake.client()
        let id = try client.start(number: "447700900000")
        #expect(try fake.messages().map(\.channel) == ["sms"])
        try client.nextChannel(id)
        let sent = try fake.messages()
        #expect(sent.map(\.channel) == ["sms", "voice"])
        #expect(sent.allSatisfy { $0.to == "447700900000" && $0.code.count == 6 })
        // No channel is left after the voice call.
        #expect(throws: PhoneVerificationError.self) { try client.nextChannel(id) }
        #expect(try client.check(id, code: sent[1].code) == .verified)
        // Over: the same code again finds nothing.
        #expect { try client.check(id, code: sent[1].code) } throws: { ($0 as? PhoneVerificationError).map { if case .notFound = $0 { true } else { false } } ?? false }
    }

    @Test("wrong codes: 400 twice, then 410 at the third, and the verification is over")
    func wrongCodes() throws {
        let fake = try Fake()
        let client = fake.client()
        let id = try client.start(number: "447700900001")
        let code = try fake.messages()[0].code
        let wrong = code == "000000" ? "111111" : "000000"
        #expect(try client.check(id, code: wrong) == .wrong)
        #expect(try client.check(id, code: wrong) == .wrong)
        #expect(try client.check(id, code: wrong) == .tooManyAttempts)
        do {
            _ = try client.check(id, code: code)
            Issue.record("the right code after 410 was accepted")
        } catch {
            #expect(error == .notFound(error.detailText))
            // No error says the code.
            #expect(!"\(error)".contains(code))
        }
    }

    @Test("409 for a second verification to the same number; cancel ends the first")
    func concurrent() throws {
        let fake = try Fake()
        let client = fake.client()
        let id = try client.start(number: "447700900002")
        #expect { try client.start(number: "447700900002") } throws: { ($0 as? PhoneVerificationError).map { if case .concurrent = $0 { true } else { false } } ?? false }
        try client.cancel(id)
        _ = try client.start(number: "447700900002")
    }

    @Test("429 over the rate limit; 422 names the invalid parameters; 401 with wrong credentials")
    func refusals() throws {
        let fake = try Fake(rateLimit: 2)
        let client = fake.client()
        _ = try client.start(number: "447700900003")
        _ = try client.start(number: "447700900004")
        #expect { try client.start(number: "447700900005") } throws: { ($0 as? PhoneVerificationError).map { if case .rateLimited = $0 { true } else { false } } ?? false }
        let other = try Fake()
        #expect(throws: PhoneVerificationError.invalidParameters(["workflow[0].to", "workflow[1].to", "code_length"])) {
            try other.client().start(number: "+44 7700", codeLength: 12)
        }
        #expect { try other.client(secret: "wrong").start(number: "447700900006") } throws: { ($0 as? PhoneVerificationError).map { if case .account = $0 { true } else { false } } ?? false }
    }

    @Test("credentials come from a file only its owner may read")
    func credentialsFile() throws {
        let directory = try TestSupport.temporaryDirectory("vonage-credentials")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("vonage.json").path
        try #"{"api_key": "k3y", "api_secret": "s3cret"}"#.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect(throws: PhoneVerificationError.self) { try VonageCredentials.load(path) }
        chmod(path, 0o600)
        let credentials = try VonageCredentials.load(path)
        #expect(!"\(credentials)".contains("s3cret"))
    }

    @Test("Each channel waits channel_timeout, then the next; after the last the request is over: 404, the number free")
    func channelTimeoutsThenExpiry() throws {
        let fake = try Fake()
        let client = fake.client()
        let id = try client.start(number: "447700900000", channelTimeout: 60)
        try fake.advance(59)
        #expect(try fake.messages().map(\.channel) == ["sms"])
        // In progress: a second verification to the number is refused.
        #expect(throws: PhoneVerificationError.self) { try client.start(number: "447700900000") }
        try fake.advance(1)
        let sent = try fake.messages()
        #expect(sent.map(\.channel) == ["sms", "voice"] && sent[0].code == sent[1].code)
        try fake.advance(60)
        do {
            _ = try client.check(id, code: sent[0].code)
            Issue.record("an expired request accepted its code")
        } catch {
            guard let failure = error as? PhoneVerificationError, case .notFound = failure else {
                Issue.record("\(error)")
                return
            }
            #expect(!failure.description.contains(sent[0].code))
        }
        // Over: the number may be verified again.
        _ = try client.start(number: "447700900000")
    }

    @Test("A request ended by the control call answers 404 to its right code, and cannot be cancelled")
    func expiredNow() throws {
        let fake = try Fake()
        let client = fake.client()
        let id = try client.start(number: "447700900000")
        let code = try #require(try fake.messages().first).code
        try fake.expire(id)
        #expect(throws: PhoneVerificationError.self) { try client.check(id, code: code) }
        #expect(throws: PhoneVerificationError.self) { try client.cancel(id) }
        #expect(throws: PhoneVerificationError.self) { try client.nextChannel(id) }
    }

}

extension PhoneVerificationError {
    fileprivate var detailText: String { if case .notFound(let d) = self { d } else { "" } }
}
