import Crypto
import StepUp
import Testing
import Timekeeping

@Suite("The change document a second factor signs")
struct ChangeDocumentTests {
    static let document = ChangeDocument(
        store: "/srv/rollout/app.rollout", baseVersion: 41, baseETag: "etag-41", parameter: "rollout_enabled",
        kind: .set, from: 10_000_000, to: 100_000_000, detail: "", reason: "all clear after a week",
        operatorID: "ana@laptop", nonce: Array(0..<16), expiresAt: Instant(seconds: 1_780_000_300))

    @Test("the canonical bytes: the format line, then every field in a fixed order")
    func canonical() {
        #expect(
            Self.document.text == """
                rollout-change/1
                store: /srv/rollout/app.rollout
                base-version: 41
                base-etag: etag-41
                parameter: rollout_enabled
                change: set
                from: 10%
                to: 100%
                flags: 
                reason: all clear after a week
                operator: ana@laptop
                nonce: 000102030405060708090a0b0c0d0e0f
                expires: 1780000300

                """)
        // The hash is SHA-256 of exactly those bytes (checked against the sha256sum of the text above).
        #expect(Hex.encode(Self.document.clientDataHash) == SHA256.hex(Array(Self.document.text.utf8)))
        #expect(Self.document.summary == "set 10% -> 100% of rollout_enabled on version 41")
    }

    @Test("a value cannot end its line or forge a field: line breaks, backslashes and controls are escaped")
    func escaping() {
        var d = Self.document
        d.reason = "ok\nto: 5%\r\\\u{1}\u{7F}é"
        let text = d.text
        #expect(text.contains("reason: ok\\nto: 5%\\r\\\\\\x01\\x7fé\n"))
        #expect(text.split(separator: "\n").count == 13)
        #expect(ChangeDocument(canonical: d.canonicalBytes) == d)
    }

    @Test("read back from its bytes, and only from exactly a document's bytes")
    func roundTrip() {
        #expect(ChangeDocument(canonical: Self.document.canonicalBytes) == Self.document)
        var bytes = Self.document.canonicalBytes
        bytes.removeLast()
        #expect(ChangeDocument(canonical: bytes) == nil)
        // An escape written in capitals decodes to the same value but is not the canonical spelling.
        var d = Self.document
        d.reason = "\u{1}"
        let upper = Array(d.text.replacingOccurrences(of: "\\x01", with: "\\X01").utf8)
        #expect(ChangeDocument(canonical: upper) == nil)
        #expect(ChangeDocument(canonical: Array(Self.document.text.replacingOccurrences(of: "from: 10%", with: "from: 10.0%").utf8)) == nil)
        #expect(ChangeDocument(canonical: Array(Self.document.text.replacingOccurrences(of: "rollout-change/1", with: "rollout-change/2").utf8)) == nil)
    }

    @Test("any field changed changes the hash")
    func everyFieldCounts() {
        let base = Self.document.clientDataHash
        var variants: [ChangeDocument] = []
        func vary(_ change: (inout ChangeDocument) -> Void) {
            var d = Self.document
            change(&d)
            variants.append(d)
        }
        vary { $0.store = "/srv/rollout/other.rollout" }
        vary { $0.baseVersion = 42 }
        vary { $0.baseETag = "etag-42" }
        vary { $0.parameter = "other_flag" }
        vary { $0.kind = .nudge }
        vary { $0.from = 10_000_001 }
        vary { $0.to = 99_999_999 }
        vary { $0.detail = "--force" }
        vary { $0.reason = "all clear after a week." }
        vary { $0.operatorID = "ben@desk" }
        vary { $0.nonce[15] ^= 1 }
        vary { $0.expiresAt = Instant(seconds: 1_780_000_301) }
        #expect(variants.count == Self.document.fields.count)
        let hashes = Set(variants.map { Hex.encode($0.clientDataHash) })
        #expect(hashes.count == variants.count)
        #expect(!hashes.contains(Hex.encode(base)))
    }

    @Test("valid strictly before its expiry")
    func expiry() {
        #expect(Self.document.isValid(at: Instant(seconds: 1_780_000_299)))
        #expect(!Self.document.isValid(at: Instant(seconds: 1_780_000_300)))
    }
}

extension String {
    fileprivate func replacingOccurrences(of a: String, with b: String) -> String {
        split(separator: a, omittingEmptySubsequences: false).joined(separator: b)
    }
}
