import Crypto
import Testing
import Timekeeping

import StepUp

@Suite("TOTP (RFC 6238) and base32 (RFC 4648)")
struct TOTPTests {
    /// RFC 6238 Appendix B, the SHA-1 rows: the key is the ASCII of "12345678901234567890", 8 digits, 30 s.
    @Test(arguments: [
        (Int64(59), Int64(0x1), "94287082"),
        (1_111_111_109, 0x23523EC, "07081804"),
        (1_111_111_111, 0x23523ED, "14050471"),
        (1_234_567_890, 0x273EF07, "89005924"),
        (2_000_000_000, 0x3F940AA, "69279037"),
        (20_000_000_000, 0x27BC86AA, "65353130"),
    ])
    func rfc6238AppendixB(time: Int64, step: Int64, code: String) throws {
        let totp = try TOTP(digits: 8)
        let secret = TOTPSecret(bytes: Array("12345678901234567890".utf8))
        #expect(totp.step(at: Instant(seconds: time)) == step)
        #expect(totp.code(secret: secret, at: Instant(seconds: time)) == code)
    }

    /// RFC 4226 Appendix D: HOTP values for counters 0...9 with the same key (6 digits).
    @Test func rfc4226AppendixD() {
        let secret = TOTPSecret(bytes: Array("12345678901234567890".utf8))
        let expected = [
            "755224", "287082", "359152", "969429", "338314", "254676", "287922", "162583", "399871", "520489",
        ]
        #expect((0..<10).map { TOTP.standard.code(secret: secret, step: Int64($0)) } == expected)
    }

    @Test func stepsAreFloorDivisionOfUnixSeconds() {
        let t = TOTP.standard
        #expect(t.step(at: Instant(seconds: 0)) == 0)
        #expect(t.step(at: Instant(seconds: 29)) == 0)
        #expect(t.step(at: Instant(microseconds: 29_999_999)) == 0)
        #expect(t.step(at: Instant(seconds: 30)) == 1)
        #expect(t.step(at: Instant(microseconds: -1)) == -1)
        #expect(t.step(at: Instant(seconds: -30)) == -1)
        #expect(t.step(at: Instant(seconds: -31)) == -2)
        #expect(t.start(ofStep: 5) == Instant(seconds: 150))
    }

    @Test func digitsOutsideTheRFCsRangeAreRefused() {
        #expect(throws: TOTPParameterError.self) { try TOTP(digits: 5) }
        #expect(throws: TOTPParameterError.self) { try TOTP(digits: 9) }
        #expect(throws: TOTPParameterError.self) { try TOTP(period: 0) }
        #expect(throws: Never.self) { try TOTP(digits: 7, period: 60) }
    }

    /// RFC 4648 §10, unpadded as the otpauth URI writes secrets.
    @Test func base32TestVectors() {
        let vectors = [
            ("", ""), ("f", "MY"), ("fo", "MZXQ"), ("foo", "MZXW6"), ("foob", "MZXW6YQ"), ("fooba", "MZXW6YTB"),
            ("foobar", "MZXW6YTBOI"),
        ]
        for (plain, encoded) in vectors {
            #expect(Base32.encode(Array(plain.utf8)) == encoded)
            #expect(Base32.decode(encoded) == Array(plain.utf8))
            let padded = encoded + String(repeating: "=", count: (8 - encoded.count % 8) % 8)
            #expect(Base32.decode(padded) == Array(plain.utf8))
        }
    }

    @Test func base32DecodingAcceptsHowPeopleTypeAndRejectsTheRest() {
        let secret = Array("12345678901234567890".utf8)
        #expect(Base32.decode("gezd gnbv gy3t qojq gezd gnbv gy3t qojq") == secret)
        #expect(Base32.decode("GEZD-GNBV-GY3T-QOJQ-GEZD-GNBV-GY3T-QOJQ") == secret)
        #expect(Base32.decode("MZXW1") == nil)  // 1 is not in the alphabet
        #expect(Base32.decode("MZXW6=YQ") == nil)  // data after padding
        #expect(Base32.decode("M") == nil)  // no encoder writes one symbol
        #expect(Base32.decode("my======") == Array("f".utf8))
        #expect(Base32.decode("MZ") == nil)  // non-zero leftover bits: no encoder writes this
    }

    @Test func base32RoundTripsEveryLength() {
        for n in 0...64 {
            let bytes = SecureRandom.bytes(n)
            #expect(Base32.decode(Base32.encode(bytes)) == bytes)
            #expect(Base32.encode(bytes).count == (n * 8 + 4) / 5)
        }
    }

    @Test func secretsNeverPrint() {
        let secret = TOTPSecret.generate()
        #expect(secret.bytes.count == 20)
        let texts = [
            "\(secret)", String(describing: secret), String(reflecting: secret), dumped(secret),
            "\(OTPAuthURI(secret: secret, issuer: "rollout", account: "ana"))",
            dumped(OperatorRecord(id: try! OperatorID("ana"), secret: secret, enrolledAt: Instant(seconds: 0))),
            String(
                describing: OperatorRecord(id: try! OperatorID("ana"), secret: secret, enrolledAt: Instant(seconds: 0))),
            dumped(
                PendingEnrolment(
                    id: try! OperatorID("ana"), secret: secret, createdAt: Instant(seconds: 0), approvedBy: nil)),
        ]
        for text in texts {
            #expect(!text.contains(secret.base32), "\(text)")
            #expect(!text.contains(Hex.encode(secret.bytes)), "\(text)")
            #expect(!text.contains(String(describing: secret.bytes)), "\(text)")
        }
        #expect(TOTPSecret(base32: secret.base32) == secret)
        #expect(TOTPSecret(base32: "") == nil)
        #expect(TOTPSecret(base32: "not base32!") == nil)
    }

    private func dumped<T>(_ value: T) -> String {
        var out = ""
        dump(value, to: &out)
        return out
    }
}
