import Crypto
import Foundation
import Testing
import TestSupport

/// AES-256-GCM of the step-up secrets at rest, checked against an outside peer: Python's `cryptography`
/// (OpenSSL underneath, but its own AEAD API) opens what we seal, we open what it seals, and any changed byte,
/// other associated data or other key is refused.
struct SecretSealingTests {
    static let peer = """
        import sys
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        key, aad = bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
        if sys.argv[1] == 'open':
            box = bytes.fromhex(sys.argv[4])
            print(AESGCM(key).decrypt(box[:12], box[12:], aad).hex())
        else:
            nonce = bytes.fromhex(sys.argv[5])
            print((nonce + AESGCM(key).encrypt(nonce, bytes.fromhex(sys.argv[4]), aad)).hex())
        """

    func peer(_ args: [String]) throws -> String {
        let r = try TestSupport.run(try TestSupport.python(), ["-c", Self.peer] + args)
        guard r.status == 0 else { throw TestSupport.Failure("python: \(r.stderr)") }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func agreesWithPythonCryptographyBothWays() throws {
        let key = SecureRandom.bytes(32)
        let secret = SecureRandom.bytes(20)
        let aad = Array("stepup secret ana@laptop".utf8)
        let box = AESGCM.seal(secret, key: key, associatedData: aad)
        #expect(box.count == 12 + 20 + 16)
        #expect(try peer(["open", Hex.encode(key), Hex.encode(aad), Hex.encode(box)]) == Hex.encode(secret))
        let theirs = try #require(Hex.decode(try peer(["seal", Hex.encode(key), Hex.encode(aad), Hex.encode(secret), Hex.encode(SecureRandom.bytes(12))])))
        #expect(try AESGCM.open(theirs, key: key, associatedData: aad) == secret)
        // Two seals of one secret differ (fresh nonces).
        #expect(AESGCM.seal(secret, key: key, associatedData: aad) != box)
    }

    @Test func anyChangeIsRefused() throws {
        let key = SecureRandom.bytes(32)
        let aad = Array("stepup secret ana@laptop".utf8)
        let box = AESGCM.seal(SecureRandom.bytes(20), key: key, associatedData: aad)
        for i in [0, 11, 12, 31, box.count - 1] {
            var edited = box
            edited[i] ^= 0x01
            #expect(throws: AESGCM.OpenError.self) { try AESGCM.open(edited, key: key, associatedData: aad) }
        }
        #expect(throws: AESGCM.OpenError.self) {
            try AESGCM.open(box, key: key, associatedData: Array("stepup secret mallory".utf8))
        }
        #expect(throws: AESGCM.OpenError.self) { try AESGCM.open(box, key: SecureRandom.bytes(32), associatedData: aad) }
        #expect(throws: AESGCM.OpenError.self) { try AESGCM.open(Array(box.prefix(20)), key: key, associatedData: aad) }
    }
}
