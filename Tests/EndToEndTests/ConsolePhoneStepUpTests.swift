import Foundation
import Rollout
import SQLiteStore
import StepUp
import Testing
import TestSupport
import Timekeeping

/// Phone step-up in the console, through the built binary in a real terminal (tmux), against the strict Verify v2
/// fake (Tests/PhoneVerificationTests/fake_verify.py): the method chooser offers the phone, the provider's status
/// shows (SMS, then a call on `c`), the code typed is masked and never on screen, Esc cancels the verification at
/// the provider (a new one to the same number is then not refused as concurrent, 409), a wrong code asks again,
/// the right one publishes, and the history names the approval; three wrong codes end the verification (the
/// provider's 410) and the dialog closes with nothing published.
@Suite("phone step-up in the console", .serialized)
struct ConsolePhoneStepUpTests {
    static let ana = "ana@lab"
    static let number = "+447700900123"

    @Test func smsCallCancelWrongThenRight() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        let fakeDirectory = try TestSupport.temporaryDirectory("console-phone-fake")
        defer { try? FileManager.default.removeItem(at: fakeDirectory) }
        let outbox = fakeDirectory.appendingPathComponent("outbox.ndjson").path
        let credentials = fakeDirectory.appendingPathComponent("vonage.json").path
        try #require(FileManager.default.createFile(atPath: outbox, contents: nil))
        try #require(
            FileManager.default.createFile(
                atPath: credentials, contents: Data(#"{"api_key": "k3y", "api_secret": "s3cret"}"#.utf8),
                attributes: [.posixPermissions: 0o600]))
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/PhoneVerificationTests/fake_verify.py").path
        let (process, input, port) = try TestSupport.startFake(
            script, ["--key", "k3y", "--secret", "s3cret", "--outbox", outbox, "--rate-limit", "100"])
        defer {
            try? input.fileHandleForWriting.close()
            TestSupport.stop(process)
        }
        let env = ["ROLLOUT_VONAGE_CREDENTIALS": credentials, "ROLLOUT_VONAGE_URL": "http://127.0.0.1:\(port)"]
        func messages() throws -> [[String: String]] {
            try String(contentsOfFile: outbox, encoding: .utf8).split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: String])
            }
        }
        func message(_ index: Int) throws -> [String: String] {
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                let all = try messages()
                if all.count > index { return all[index] }
                usleep(20_000)
            }
            throw TestSupport.Failure("no message \(index) reached the phone within 20 s")
        }

        func cli(_ arguments: [String], minutesAgo: Int, stdin: String? = nil) throws -> TestSupport.ProcessResult {
            try TestSupport.run(
                f.binary, arguments + ["--store", f.store, "--operator", Self.ana],
                stdin: stdin, environment: env, fakeTime: "-\(minutesAgo)m")
        }
        func code(_ secret: TOTPSecret, minutesAgo: Int) -> String {
            TOTP.standard.code(secret: secret, at: Instant(seconds: Int64(Date().timeIntervalSince1970) - Int64(minutesAgo * 60)))
        }
        try #require(try cli(["set", "5", "--reason", "start"], minutesAgo: 59).status == 0)
        let started = try cli(["operator", "enroll"], minutesAgo: 58)
        let secret = try #require(OperatorCLITestsSecret.parse(started.stdout))
        try #require(try cli(["operator", "enroll", "--code", "-"], minutesAgo: 58, stdin: code(secret, minutesAgo: 58) + "\n").status == 0)
        let phone = try cli(
            ["operator", "enroll", "--method", "phone", "--phone", Self.number, "--code", code(secret, minutesAgo: 56)], minutesAgo: 56)
        try #require(phone.status == 0, "\(phone.stderr)")
        func version() throws -> Int { try RolloutStore(path: f.store, create: false).configStore().current().info.number }
        let base = try version()

        let command = [f.binary, "console", "--store", f.store, "--operator", Self.ana].map(TerminalSession.quote).joined(separator: " ")
        let console = try TerminalSession(["sh", "-c", command], width: 140, height: 36, environment: env.mapValues { $0 })
        defer { console.close() }
        try console.waitFor("<= 5", timeout: 20)
        func proposeWithPhone() throws {
            try console.press("=")
            try console.waitFor("Set the percentage")
            try console.type("30")
            try console.press("Enter")
            try console.waitFor("Confirm: set 30%")
            try console.press("Tab", "Enter")
            try console.waitFor("Reason for the increase")
            try console.type("second wave")
            try console.press("Enter")
            try console.waitFor("Approve with:")
            let chooser = try console.screen()
            #expect(chooser.contains("phone (a code by SMS or a call)"), "\(chooser)")
            try console.press("2")
        }

        // SMS, then a call on `c`; Esc cancels at the provider.
        try proposeWithPhone()
        try console.waitFor("a code by SMS to +44••••••0123", timeout: 15)
        #expect(try message(0)["channel"] == "sms")
        try console.press("c")
        try console.waitFor("calling your phone now")
        #expect(try message(1)["channel"] == "voice")
        try console.press("Escape")
        try console.waitFor("phone verification was cancelled")
        #expect(try version() == base)
        // Given up, as at the CLI's prompt: a refused step-up in the audit log (a verification was sent), no code.
        func cancelledRecords() throws -> [AuditRecord] {
            try RolloutStore(path: f.store, create: false).configStore().auditRecords(limit: 1000, before: nil).filter {
                $0.entry.result == .stepUpRefused && $0.entry.detail.contains("method phone")
                    && $0.entry.detail.contains("no code was entered; the verification was cancelled")
            }
        }
        let cancelDeadline = Date().addingTimeInterval(15)
        while try cancelledRecords().isEmpty, Date() < cancelDeadline { usleep(20_000) }
        #expect(try cancelledRecords().count == 1)

        // Again: the fake refuses a second verification to a number with one in progress (409), so this one
        // starting shows the first was cancelled at the provider.
        try proposeWithPhone()
        try console.waitFor("a code by SMS to +44••••••0123", timeout: 15)
        let sent = try message(2)
        let real = try #require(sent["code"])
        let wrong = real == "0000" ? "1111" : "0000"
        try console.type(wrong)
        try console.waitFor("••••")
        try console.press("Enter")
        try console.waitUntil("the wrong code refused, the prompt again") { $0.contains("wrong") && $0.contains("Phone verification") }
        #expect(try version() == base)
        try console.type(real)
        #expect(!(try console.screen()).contains(real), "the code must be masked")
        try console.press("Enter")
        try console.waitFor("<= 30", timeout: 15)
        #expect(try version() == base + 1)

        try console.press("h")
        try console.waitFor("approved by \(Self.ana) (phone)")
        try console.press("Escape")

        // Three wrong codes: the provider's 410 ends the verification and the dialog closes; nothing published.
        try console.press("=")
        try console.waitFor("Set the percentage")
        try console.type("45")
        try console.press("Enter")
        try console.waitFor("Confirm: set 45%")
        try console.press("Tab", "Enter")
        try console.waitFor("Reason for the increase")
        try console.type("third wave")
        try console.press("Enter")
        try console.waitFor("Approve with:")
        try console.press("2")
        try console.waitFor("a code by SMS to +44••••••0123", timeout: 15)
        let third = try #require(try message(3)["code"])
        let bad = third == "0000" ? "1111" : "0000"
        /// The phone step-ups the write path refused and audited so far.
        func refusedPhoneCodes() throws -> Int {
            try RolloutStore(path: f.store, create: false).configStore().auditRecords(limit: 1000, before: nil).filter {
                $0.entry.result == .stepUpRefused && $0.entry.detail.contains("method phone")
            }.count
        }
        for attempt in 1...3 {
            let before = try refusedPhoneCodes()
            try console.type(bad)
            try console.press("Enter")
            // Each code's answer (audited) before the next is typed: keys wait while a code is checked.
            let deadline = Date().addingTimeInterval(15)
            while try refusedPhoneCodes() == before, Date() < deadline { usleep(20_000) }
            #expect(try refusedPhoneCodes() == before + 1, "attempt \(attempt)")
            // The answer reached the console once the dialog no longer says the code is being checked.
            if attempt < 3 { try console.waitForAbsence(of: "checking the code") }
        }
        try console.waitFor("the phone verification ended", timeout: 15)
        #expect(try version() == base + 1)
        // The code is nowhere in the audit log.
        let audit = try TestSupport.run(f.binary, ["audit", "show", "--json", "--limit", "100", "--store", f.store])
        #expect(audit.status == 0)
        #expect(!audit.stdout.contains("\"\(real)\"") && !audit.stdout.contains(" \(real)"), "the code must not be audited")
        print("console phone step-up: SMS, a call on c, Esc cancelled at the provider, a wrong code asked again, v\(base + 1) published on the right one")
    }
}
