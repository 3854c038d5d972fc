import Crypto
import Timekeeping

// libFuzzer entry for the App Attest decoders. Built by build.sh with the AppCheck sources in the same module.
// The first byte picks the target; the rest is its input:
//   0 attestation object through every check of AttestationVerifier (CBOR, X.509, nonce DER, authData)
//   1 assertion through AssertionVerifier
//   2 CBOR alone, with the property decode(encode(decode(x))) == decode(x)
//   3 the nonce extension's DER
//   4 authenticator data with attested credential data (COSE key prefix decoding)
// The fixed inputs are those of the webauthn4j/kayak and veehaitch vectors, so the seeds pass every check.

private let kayakApp = AppIdentity(teamId: "8YE23NZS57", bundleId: "com.kayak.travel")
private let kayakKeyId = Base64.decode("VnfqjSp0rWyyqNhrfh+9/IhLIvXuYTPAmJEVQwl4dko=")!
private let kayakClientDataHash = Base64.decode("vdrOOJAgFiv8POwNggQqju68c8sP3Pm1C94DpHYynWY=")!
private let kayakTime = ISO8601.parse("2020-09-28T00:00:00Z")!
private let veehaitchApp = AppIdentity(teamId: "6MURL8TA57", bundleId: "de.vincent-haupert.apple-appattest-poc")
private let veehaitchClientDataHash = Base64.decode("i+ZcylFa0JfJU5Z9GNY12G3XihQu09B3UmvtEca+xns=")!
private let veehaitchKey = P256PublicKey(
    uncompressedPoint: Base64.decode(
        "BIjANKGQqn28WgYVAcZUKAOUJYIZiz8cxUZzyjua0gtBUoJnpU9f26BGn6+0a7aZCjlr8E+UpJ1DIMgcerJAo5g=")!)!
private let attestationVerifier = AttestationVerifier()
private let assertionVerifier = AssertionVerifier(app: veehaitchApp)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 5 {
    case 0:
        let report = attestationVerifier.evaluate(
            attestation: input, keyId: kayakKeyId, clientDataHash: kayakClientDataHash, app: kayakApp,
            environment: .production, at: kayakTime)
        precondition(report.checks.count == 9, "every check is reported")
    case 1:
        let report = assertionVerifier.evaluate(
            assertion: input, clientDataHash: veehaitchClientDataHash, publicKey: veehaitchKey, previousCounter: 0)
        precondition(report.checks.count == 4, "every check is reported")
    case 2:
        if let value = try? CBORDecoder().decode(input) {
            let again = try? CBORDecoder().decode(value.encoded())
            precondition(again == value, "CBOR re-encoding changed the value")
        }
    case 3:
        if let nonce = try? AppAttestNonceExtension.nonce(fromExtensionValue: input) { precondition(nonce.count == 32) }
    default:
        if let authData = try? AuthenticatorData(input), let credential = try? authData.attestedCredential() {
            precondition(credential.extensionBytes >= 0 && credential.aaguid.count == 16)
        }
    }
    return 0
}
