import AppCheck
import Crypto
import Testing

/// The stored-point key that assertions are verified with: which points load, and that ECDSA verification accepts
/// exactly the signatures of its private key over the exact message.
@Suite struct P256PublicKeyTests {
    @Test func verifiesItsPrivateKeysSignaturesOnly() throws {
        let key = try P256PrivateKey()
        let other = try P256PrivateKey()
        let message = Array("nonce of an assertion".utf8)
        let signature = try key.signature(for: message)
        let loaded = try #require(P256PublicKey(uncompressedPoint: key.publicPoint))
        #expect(loaded.uncompressedPoint == key.publicPoint)
        #expect(loaded.isValidSignature(signature, for: message))
        #expect(!loaded.isValidSignature(signature, for: message + [0]))
        #expect(!loaded.isValidSignature(signature, for: Array(message.dropLast())))
        #expect(!loaded.isValidSignature(try other.signature(for: message), for: message))
        // Bytes after the DER signature, or a changed byte inside it, are refused.
        #expect(!loaded.isValidSignature(signature + [0], for: message))
        var flipped = signature
        flipped[flipped.count - 1] ^= 1
        #expect(!loaded.isValidSignature(flipped, for: message))
        #expect(!loaded.isValidSignature([], for: message))
    }

    @Test func refusesPointsThatAreNotUncompressedP256Points() throws {
        let point = try P256PrivateKey().publicPoint
        #expect(P256PublicKey(uncompressedPoint: point) != nil)
        var offCurve = point
        offCurve[64] ^= 1
        #expect(P256PublicKey(uncompressedPoint: offCurve) == nil)
        var compressedPrefix = point
        compressedPrefix[0] = 0x02
        #expect(P256PublicKey(uncompressedPoint: compressedPrefix) == nil)
        #expect(P256PublicKey(uncompressedPoint: Array(point.dropLast())) == nil)
        #expect(P256PublicKey(uncompressedPoint: point + [0]) == nil)
        #expect(P256PublicKey(uncompressedPoint: [0x04] + [UInt8](repeating: 0, count: 64)) == nil)
        #expect(throws: AssertionError.invalidStoredKey) {
            _ = try AssertionVerifier(app: AppIdentity(teamId: "TEAMID1234", bundleId: "dev.rollout.test")).verify(
                assertion: [], clientDataHash: [UInt8](repeating: 0, count: 32), publicKey: offCurve, previousCounter: 0)
        }
    }

    @Test func keysAreSharedAcrossThreads() async throws {
        let key = try P256PrivateKey()
        let message = Array("shared".utf8)
        let signature = try key.signature(for: message)
        let loaded = try #require(P256PublicKey(uncompressedPoint: key.publicPoint))
        let results = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<8 {
                group.addTask { loaded.isValidSignature(signature, for: message) && !loaded.isValidSignature(signature, for: message + [UInt8(i)]) }
            }
            var all: [Bool] = []
            for await r in group { all.append(r) }
            return all
        }
        #expect(results == Array(repeating: true, count: 8))
    }

    /// Released keys are reused for the next point (the spare pool): a key verifies its own point's signatures
    /// and never a previous holder's, when keys come and go on many threads at once and between refused points
    /// (whose failed decode must not leave a half-set key in the pool).
    @Test func reusedKeysHoldOnlyTheirOwnPoint() async throws {
        let signers = try (0..<6).map { _ in try P256PrivateKey() }
        let message = Array("reused".utf8)
        let signatures = try signers.map { try $0.signature(for: message) }
        var offCurve = signers[0].publicPoint
        offCurve[64] ^= 1
        let bad = offCurve
        let failures = await withTaskGroup(of: Int.self) { group in
            for t in 0..<8 {
                group.addTask {
                    var failures = 0
                    for round in 0..<300 {
                        let i = (t + round) % signers.count
                        if P256PublicKey(uncompressedPoint: bad) != nil { failures += 1 }
                        guard let key = P256PublicKey(uncompressedPoint: signers[i].publicPoint) else {
                            failures += 1
                            continue
                        }
                        if !key.isValidSignature(signatures[i], for: message) { failures += 1 }
                        if key.isValidSignature(signatures[(i + 1) % signers.count], for: message) { failures += 1 }
                    }
                    return failures
                }
            }
            var total = 0
            for await f in group { total += f }
            return total
        }
        #expect(failures == 0)
    }
}
