@testable import AppCheck
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

// A fixed RSA-2048 test key (PKCS#8 DER), so that the seed tokens in corpus/ carry valid signatures (kid
// wmMpbIpHLiyWzTDw) and mutations of the header and payload can reach every claim check.
private let keyDER =
    "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDR56y80K6bFumyrmmp5SJixPKOSFJc7FLi535U5PbubXuVrdqP"
    + "rYNMx5pZ1THByDIucARNnZUTCkpJ/nLWKmaQVUPXw28V6BffibWkaVRfC9wmtl90iaOQ5KaptAbK56ut0XJHLae/Ym7xGnuRbpQ/"
    + "OJx8fbzAPRworGUkWz0WlPOH9AxMwhYKb0M2LZuU78QdrdFCq9G8fAYhwMJxZOgua5aEL/qGLvn96/7eOuhljTTZZWXitptj7iPB"
    + "7vxdAb/BrjaX4ZfFEmUpaEYOk9Rjd/P9cng6lo0ECVv20m7JdPZTBF07TKHj49TidVfNttFPAY48Mcc1cunra+hBKWlzAgMBAAEC"
    + "ggEAHa5Hw68ycWWtCAIXmNl4okS9E5dwZglYsxMOzwxNSmuaxRB/Tj+3yDyVO8ykq4UWa3CVezAkKzwSQyJCtLvsIs6buD+/Tnay"
    + "IX7Ee4oVTxdLOwIgv0bTJSLf2jFFoJ1frkVmhmATT0Go9FjNTkQ3nDTyE7xn2zsI50txRdHM8os9jht7Cla82sPvNr8zyfZwvwT3"
    + "RtbhJQ1nskVBVfvUAqt+v7iOg8JEdw75jjJnOvpgbJlSyEbx2xhC5L4LbXfeCBEjExhL+2FMzWYxCUXsMrO2sT4PUnnt20bUqAnA"
    + "34bZ55qZrPYZ/cFTGAbssjw5OnDYrgLLhdh/wuUpmYLYWQKBgQD9k4xxeGbehC2N0eHK8CPNoChXh2z8ctZat7CnH0Pm1oT4FwyW"
    + "1dQ/XTHGAgIeq6U+w/CfxPYMABGa5FDVXAeyc2OalYPjQGrvsDf7SYsqk+W2HNRRgj7FNQwbs7MPgi8obKZcXZQArlzYi10PLZvm"
    + "p/rXPQ/iZ2/IAI+OOn9xrwKBgQDT6UVYiOQl8OwZfFF9rnyaw09SkI+GpDbKR8EOHAjqnzbioFGZcDAR6d20AeAu4MkCoE5POssj"
    + "BDiGoMMG47a+cEPyqYOauba6/Gg4cQcTYD7NuLTmCQ5REi6CEX80lxaxITjQAn8BZykXwxSBuL+vtc2xlgi9iDQYPOGWM7xJfQKB"
    + "gQDC+ikLNuEiR9AfNDrBqFRfT761TtRmaIaZypRybH/xhxFHEbIEaPaCok4bSoAGxUSSNmdW8kOeho8C4nulEtZ4SHFV85Ets+KF"
    + "2qGw/qObYY1HsnMvGU7apCdjRZFxY1CPbLueWfXrcCbD+qTbft5ZROCDj9ge5hn1VzkKy8Ai0QKBgQDOX075edc2W/qSl0+FZnhT"
    + "AAIwFjiwlxwEwvxwET1dwNBixF6zX15xE6ClvW3mOWOI+zVIU6mg4GtsMQO9oeZGcG670/ompNYgI9Abp3eMlx6Sml8R55/ZtCs2"
    + "4HNRdBLVTdVWPhgR9bU/PuypqJKFPDilyceZTRvuvtuyu4+SwQKBgC5RWs3F0zh9FGhMnARj+yCu3QL6yBTplymY+/8OIHm5FGr+"
    + "LOlHLhubGs2mZia9snaa+K+5+wTtBmZHo+w6DeJsJ7NKLYuXRfYRxjxipGLoB5mXfsRHph1zIBjAOAi/VghEIZ/HH04lp4EOOKOU"
    + "0fwLW0mAOeKkJsLbHmCUG/54"
private let key = try! AppCheckSigningKey(
    privateKeyDER: Base64.decode(keyDER, .standard)!, createdAt: Instant(seconds: 1_780_000_000))
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
