import Crypto
import TestSupport
import Testing

/// SHA-256 against FIPS 180-2's examples, whole and in pieces.
struct SHA256Tests {
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
    ])
    func knownDigests(text: String, hex: String) {
        #expect(SHA256.hex(Array(text.utf8)) == hex)
        #expect(Hex.encode(SHA256.hash(text)) == hex)
        var pieces = SHA256.Hasher()
        for c in text.utf8 { pieces.update([c]) }
        #expect(Hex.encode(pieces.finish()) == hex)
    }

    @Test func aMillionAs() {
        var h = SHA256.Hasher()
        let chunk = [UInt8](repeating: 0x61, count: 1000)
        for _ in 0..<1000 { h.update(chunk) }
        #expect(Hex.encode(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }
}

/// HMAC against RFC 4231 (SHA-256) and RFC 2202 (SHA-1, TOTP's) test case 2.
struct HMACTests {
    @Test func knownMACs() {
        let key = Array("Jefe".utf8)
        let message = Array("what do ya want for nothing?".utf8)
        #expect(
            Hex.encode(HMAC.authenticate(.sha256, key: key, message: message))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(
            Hex.encode(HMAC.authenticate(.sha1, key: key, message: message))
                == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
    }
}

/// AES-256-GCM boxes: what is sealed opens with the same key and associated data only, any edited byte is
/// refused, and the box is standard GCM (`nonce ‖ ciphertext ‖ tag`), opened here by Python's `cryptography`.
struct AESGCMTests {
    static let key = (0..<32).map { UInt8($0 &* 7 &+ 3) }

    @Test func roundTripsAndBindsKeyAndAssociatedData() throws {
        let secret = Array("JBSWY3DPEHPK3PXP".utf8)
        let box = AESGCM.seal(secret, key: Self.key, associatedData: Array("operator:alice".utf8))
        #expect(box.count == AESGCM.nonceSize + secret.count + AESGCM.tagSize)
        #expect(try AESGCM.open(box, key: Self.key, associatedData: Array("operator:alice".utf8)) == secret)
        #expect(throws: AESGCM.OpenError.self) {
            try AESGCM.open(box, key: Self.key, associatedData: Array("operator:mallory".utf8))
        }
        var other = Self.key
        other[0] ^= 1
        #expect(throws: AESGCM.OpenError.self) { try AESGCM.open(box, key: other, associatedData: Array("operator:alice".utf8)) }
        // Fresh nonces: the same secret seals differently each time.
        #expect(AESGCM.seal(secret, key: Self.key) != AESGCM.seal(secret, key: Self.key))
    }

    @Test func everyEditedByteIsRefused() {
        let box = AESGCM.seal(Array("secret".utf8), key: Self.key)
        for i in box.indices {
            var edited = box
            edited[i] ^= 0x80
            #expect(throws: AESGCM.OpenError.self, "byte \(i)") { try AESGCM.open(edited, key: Self.key) }
        }
        #expect(throws: AESGCM.OpenError.self) { try AESGCM.open(Array(box.prefix(27)), key: Self.key) }
    }

    @Test func pythonsCryptographyOpensTheBox() throws {
        let box = AESGCM.seal(Array("hello, gcm".utf8), key: Self.key, associatedData: Array("ad".utf8))
        let script = """
            import sys
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            key, box = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
            print(AESGCM(key).decrypt(box[:12], box[12:], b"ad").decode())
            """
        let r = try TestSupport.run(try TestSupport.python(), ["-c", script, Hex.encode(Self.key), Hex.encode(box)])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "hello, gcm\n")
    }
}

/// Base64 (RFC 4648 §10's vectors) in the spellings App Check clients send, each only in its canonical form;
/// hex both ways.
struct EncodingTests {
    @Test(arguments: [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ])
    func rfc4648(text: String, encoded: String) {
        let bytes = Array(text.utf8)
        #expect(Base64.encode(bytes) == encoded)
        #expect(Base64.decode(encoded, .standard) == bytes)
        let bare = String(encoded.prefix { $0 != "=" })
        #expect(Base64.encodeURL(bytes) == bare)
        #expect(Base64.decode(bare, .jwt) == bytes)
        #expect(Base64.decode(bare) == bytes)
    }

    @Test func alphabetsAndPaddingAreChecked() {
        let bytes: [UInt8] = [0xfb, 0xff, 0xbf]
        #expect(Base64.encode(bytes) == "+/+/")
        #expect(Base64.encodeURL(bytes) == "-_-_")
        #expect(Base64.decode("-_-_", .standard) == nil)
        #expect(Base64.decode("+/+/", .jwt) == nil)
        #expect(Base64.decode("+/-_") == nil)  // two alphabets in one input
        #expect(Base64.decode("Zg==", .jwt) == nil)  // jwt forbids padding
        #expect(Base64.decode("Zg", .standard) == nil)  // standard requires it
        #expect(Base64.decode("Zh==") == nil)  // non-zero leftover bits: not canonical
        #expect(Base64.decode("Z") == nil)
        #expect(Base64.decode("Zm9v\n") == nil)
        #expect(Base64.decode("Zg=") == nil)
    }

    /// The encoder writes whole groups and the tail straight into the string; checked against a reference that
    /// takes the input six bits at a time, for every tail length and both alphabets, padded and not.
    @Test func encodingAgreesWithSixBitsAtATime() {
        func reference(_ bytes: [UInt8], url: Bool, padded: Bool) -> String {
            let table = Array(
                (url
                    ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                    : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"))
            let bits = bytes.flatMap { b in (0..<8).map { (b >> (7 - $0)) & 1 } }
            var out = ""
            var i = 0
            while i < bits.count {
                var v = 0
                for j in 0..<6 { v = v << 1 | Int(i + j < bits.count ? bits[i + j] : 0) }
                out.append(table[v])
                i += 6
            }
            if padded { while out.count % 4 != 0 { out.append("=") } }
            return out
        }
        var generator = SystemRandomNumberGenerator()
        for length in 0...70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            for (url, padded) in [(false, true), (false, false), (true, true), (true, false)] {
                let expected = reference(bytes, url: url, padded: padded)
                #expect(Base64.encode(bytes, urlSafe: url, padded: padded) == expected, "\(length) bytes")
                #expect(Base64.encode(bytes[...], urlSafe: url, padded: padded) == expected)
                #expect(bytes.withUnsafeBytes { Base64.encode($0, urlSafe: url, padded: padded) } == expected)
            }
            #expect(Base64.decode(Base64.encodeURL(bytes), .jwt) == bytes)
        }
    }

    @Test func hexBothWays() {
        #expect(Hex.encode([0x00, 0x0f, 0xa5, 0xff]) == "000fa5ff")
        #expect(Hex.decode("000FA5ff") == [0x00, 0x0f, 0xa5, 0xff])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
    }
}
