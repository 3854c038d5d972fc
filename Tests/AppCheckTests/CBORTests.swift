import AppCheck
import TestSupport
import Testing

@Suite struct CBORTests {
    let decoder = CBORDecoder()

    @Test func roundTripsEveryKindWithShortestHeads() throws {
        let value = CBOR.map([
            .init(
                .text("u"),
                .array([
                    .unsigned(0), .unsigned(23), .unsigned(24), .unsigned(255), .unsigned(256), .unsigned(65_536),
                    .unsigned(UInt64.max),
                ])),
            .init(.int(-1), .array([.negative(0), .negative(1_000_000), .int(-7)])),
            .init(.text("b"), .bytes([0, 1, 2])), .init(.text("t"), .text("héllo")),
            .init(.text("k"), .array([.bool(true), .bool(false), .null])), .init(.text("m"), .map([])),
        ])
        let bytes = value.encoded()
        #expect(try decoder.decode(bytes) == value)
        #expect(CBOR.unsigned(23).encoded() == [0x17])
        #expect(CBOR.unsigned(24).encoded() == [0x18, 24])
        #expect(CBOR.unsigned(256).encoded() == [0x19, 1, 0])
        #expect(CBOR.int(-7).encoded() == [0x26])
        #expect(CBOR.bytes([UInt8](repeating: 0, count: 300)).encoded().prefix(3) == [0x59, 0x01, 0x2c])
        #expect(
            try decoder.decode([0x18, 0x05]) == .unsigned(5), "non-shortest heads are accepted (cbor2 accepts them too)"
        )
    }

    @Test func refusesWhatAppAttestNeverUses() {
        #expect(throws: CBORError.indefiniteLength(offset: 0)) { try decoder.decode([0x5f, 0x41, 0x00, 0xff]) }
        #expect(throws: CBORError.indefiniteLength(offset: 0)) { try decoder.decode([0x9f, 0xff]) }
        #expect(throws: CBORError.indefiniteLength(offset: 0)) { try decoder.decode([0xff]) }
        #expect(throws: CBORError.unsupportedItem(offset: 0, what: "tag")) { try decoder.decode([0xc0, 0x00]) }
        #expect(throws: CBORError.unsupportedItem(offset: 0, what: "floating-point number")) {
            try decoder.decode([0xf9, 0x3c, 0x00])
        }
        #expect(throws: CBORError.unsupportedItem(offset: 0, what: "simple value 23")) { try decoder.decode([0xf7]) }
        #expect(throws: CBORError.unsupportedItem(offset: 0, what: "reserved additional information 28")) {
            try decoder.decode([0x1c])
        }
        #expect(throws: CBORError.duplicateMapKey(offset: 4)) {
            try decoder.decode([0xa2, 0x61, 0x61, 0x00, 0x61, 0x61, 0x01])
        }
        #expect(throws: CBORError.invalidUTF8(offset: 0)) { try decoder.decode([0x62, 0xc3, 0x28]) }
    }

    @Test func boundsEveryDimension() throws {
        #expect(throws: CBORError.truncated(offset: 3)) { try decoder.decode([0x82, 0x41, 0x00]) }
        #expect(throws: CBORError.lengthBeyondInput(offset: 0, length: 2)) { try decoder.decode([0x82, 0x00]) }
        #expect(throws: CBORError.truncated(offset: 2)) { try decoder.decode([0x19, 0x01]) }
        #expect(throws: CBORError.lengthBeyondInput(offset: 0, length: 4)) { try decoder.decode([0x44, 1, 2]) }
        #expect(throws: CBORError.lengthBeyondInput(offset: 0, length: 0xffff_ffff)) {
            try decoder.decode([0xba, 0xff, 0xff, 0xff, 0xff])
        }
        #expect(throws: CBORError.trailingBytes(offset: 1, count: 2)) { try decoder.decode([0x00, 0x00, 0x00]) }
        let small = CBORDecoder(limits: .init(maxBytes: 10, maxDepth: 3, maxItems: 4))
        #expect(throws: CBORError.inputTooLarge(size: 11, limit: 10)) {
            try small.decode([0x4a] + [UInt8](repeating: 0, count: 10))
        }
        #expect(throws: CBORError.nestingTooDeep(offset: 3, limit: 3)) { try small.decode([0x81, 0x81, 0x81, 0x00]) }
        #expect(throws: CBORError.tooManyItems(offset: 4, limit: 4)) { try small.decode([0x84, 0, 0, 0, 0]) }
        #expect(try small.decode([0x83, 0, 0, 0]) == .array([.unsigned(0), .unsigned(0), .unsigned(0)]))
    }

    @Test func prefixDecodingReportsWhereTheItemEnds() throws {
        let bytes: [UInt8] = [0xff, 0xa1, 0x01, 0x02, 0xde, 0xad]
        let (item, end) = try decoder.decodePrefix(bytes[1...])
        #expect(item == .map([.init(.unsigned(1), .unsigned(2))]))
        #expect(end == 4)
        #expect(item[1] == .unsigned(2))
    }

    /// Random single-byte mutations of a real attestation never crash and always give a typed verdict.
    @Test func mutatedRealAttestationsGiveTypedVerdicts() throws {
        let v = try AppAttestVector.load("webauthn4j-kayak-2020")
        var rng = SplitMix64(state: 0x5eed)
        var reasons: Set<String> = []
        for _ in 0..<300 {
            var bytes = v.attestation
            let i = Int(rng.next() % UInt64(min(bytes.count, 1600)))
            bytes[i] = UInt8(truncatingIfNeeded: rng.next())
            let report = AttestationVerifier().evaluate(
                attestation: bytes, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
                environment: v.environment, at: v.verifyAt)
            if let e = report.failure { reasons.insert(e.code) }
        }
        #expect(reasons.count >= 3, "\(reasons)")
    }
}
