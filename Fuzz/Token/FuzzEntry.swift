import Crypto
import JSON
import Timekeeping

// libFuzzer entry for the App Check token verifier (AppCheckTokenVerifier). Built by build.sh with the AppCheck
// sources in the same module. The first byte picks the path; the rest is its input:
//   0 the input as the token text: strict base64url segments, JSON, header and signature checks
//   1 the input as the payload JSON, signed with the verifier's key: every claim check, extreme values included
//   2 the next byte is a header length n; n bytes of header JSON, then the payload JSON, both signed
// Every path also runs the consuming verification against a fresh in-memory state. Properties: no trap; every
// check is reported (format + 7, + replay when consuming); an accepted token has claims within 1970 ... 9999 and
// a canonical text (re-encoding its segments gives the token back); its replay key is stable.

private let key = try! AppCheckSigningKey.generate(createdAt: Instant(seconds: 1_780_000_000))
private let issuer = AppCheckTokenIssuer(key: key)
private let project = AppCheckProject(number: "123456789012", id: "rollout-demo")
private let verifier = AppCheckTokenVerifier(project: project, keys: [key], appIds: ["1:123456789012:ios:demo"])
private let now = Instant(seconds: 1_780_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let token: String
    switch data[0] % 3 {
    case 0:
        token = String(decoding: input, as: UTF8.self)
    case 1:
        guard let t = try? issuer.token(payload: input) else { return 0 }
        token = t
    default:
        guard let n = input.first.map(Int.init), input.count > n else { return 0 }
        guard let t = try? issuer.token(payload: Array(input[(n + 1)...]), header: Array(input[1..<(n + 1)])) else {
            return 0
        }
        token = t
    }
    let report = verifier.evaluate(token, at: now)
    precondition(report.checks.count == 8, "every check is reported")
    let consuming = verifier.evaluate(token, at: now, consumingIn: InMemoryAppCheckState())
    precondition(consuming.checks.count == 9, "every check and the replay check are reported")
    precondition(consuming.passed == report.passed, "a fresh state changes nothing but the replay record")
    if let claims = report.value {
        precondition((0...AppCheckTokenVerifier.latestTime).contains(claims.issuedAt))
        precondition(claims.issuedAt < claims.expiresAt && claims.expiresAt <= AppCheckTokenVerifier.latestTime)
        precondition(now < Instant(seconds: claims.expiresAt))
        let segments = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        for s in segments {
            precondition(Base64.encodeURL(Base64.decode(s, .jwt)!) == s, "an accepted token is not canonical")
        }
        // The same claims issued again verify to the same claims.
        precondition(verifier.evaluate(try! issuer.token(claims), at: now).value == claims)
    }
    return 0
}
