@testable import AppCheck
import Crypto
import Timekeeping

// libFuzzer entry for the App Attest decoders. Built by build.sh with the AppCheck sources in the same module.
// The first byte picks the target; the rest is its input:
//   0 attestation object through every check of AttestationVerifier (CBOR, X.509, nonce DER, authData)
//   1 assertion through AssertionVerifier
//   2 CBOR alone, with the property decode(encode(decode(x))) == decode(x)
//   3 the nonce extension's DER
//   4 authenticator data with attested credential data (COSE key prefix decoding)
//   5 a chain the demo CA signs for real, so the checks behind the signatures are reached: the next byte picks
//     the chain's shape (Apple's; leaf issued by the root; root as the intermediate; a CA leaf; three
//     certificates), two bytes give the length of the nonce extension value (its last 32 bytes are replaced by
//     the real nonce), the rest is authData. Each wrong shape must fail with its own reason; an accepted one has
//     the certificate's key as its COSE key.
// The fixed inputs are those of the webauthn4j/kayak and veehaitch vectors, so the seeds pass every check; the
// demo-chain seeds carry authData for the fixed key below.

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
private let demoAuthority = try! DemoCertificateAuthority.generate()
private let demoVerifier = AttestationVerifier(trust: demoAuthority.trustAnchors)
private let demoApp = AppIdentity(teamId: "DEMOTEAM42", bundleId: "dev.rollout.demo")
private let demoTime = ISO8601.parse("2026-06-01T12:00:00Z")!
private let demoClientDataHash = SHA256.hash("fuzz challenge")
/// A fixed P-256 key (PKCS#8 DER): the seeds' authData names it (credentialId, COSE key).
private let demoKey = try! P256PrivateKey(
    der: Base64.decode(
        "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgolJE1YEVsl7sWeDx40u9oby1sq4acuGnL4K8RHu/416hRANCAASH4Gqn7ZOkaZnc+QaGnJu6xtGwIjn7nxF92ffM7ZCLMsLzJ/bks/Msg8FkHOP4Xra0v329iz6/qSGiDpONKNXS",
        .standard)!)

private func demoChain(_ input: [UInt8]) {
    guard input.count >= 3 else { return }
    let shape = input[0] % 5
    let length = Int(input[1]) << 8 | Int(input[2])
    guard input.count >= 3 + length else { return }
    var value = Array(input[3..<(3 + length)])
    let authData = Array(input[(3 + length)...])
    var hasher = SHA256.Hasher()
    hasher.update(authData)
    hasher.update(demoClientDataHash)
    let nonce = hasher.finish()
    if value.count >= 32 { value.replaceSubrange((value.count - 32)..., with: nonce) }
    let issuer: DemoCertificateAuthority.ForgedIssuer = shape == 1 || shape == 2 ? .root : .intermediate
    guard
        let leaf = try? demoAuthority.forgedCredentialCertificate(
            for: demoKey, nonceExtensionValue: value, at: demoTime, issuedBy: issuer, certificateAuthority: shape == 3)
    else { return }
    let intermediate = demoAuthority.intermediate.der
    let chain: [[UInt8]] =
        switch shape {
        case 2: [leaf.der, demoAuthority.root.der]
        case 4: [leaf.der, intermediate, intermediate]
        default: [leaf.der, intermediate]
        }
    let attestation = AttestationObject(certificates: chain, receipt: [1], authenticatorData: authData).encoded()
    let report = demoVerifier.evaluate(
        attestation: attestation, keyId: SHA256.hash(demoKey.publicPoint), clientDataHash: demoClientDataHash,
        app: demoApp, environment: .production, at: demoTime)
    precondition(report.checks.count == 9, "every check is reported")
    if case .malformedAttestation? = report.failure { return }
    switch shape {
    case 1: precondition(report.failure == .leafIssuedByRoot, "a leaf issued by the root was not refused as such")
    case 2: precondition(report.failure == .rootAsIntermediate(index: 1), "the root as intermediate was not refused")
    case 3:
        guard case .caConstraintViolated(0, _)? = report.failure else { preconditionFailure("a CA leaf was accepted") }
    case 4: precondition(report.failure == .unexpectedChainLength(3), "three certificates were not refused")
    default:
        if report.passed {
            let credential = try! AuthenticatorData(authData).attestedCredential()
            precondition(credential.uncompressedPoint == demoKey.publicPoint, "a foreign COSE key was accepted")
            precondition(
                (try? AppAttestNonceExtension.nonce(fromExtensionValue: value)) == nonce,
                "accepted without the nonce")
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 6 {
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
    case 5:
        demoChain(input)
    default:
        if let authData = try? AuthenticatorData(input), let credential = try? authData.attestedCredential() {
            precondition(credential.extensionBytes >= 0 && credential.aaguid.count == 16)
        }
    }
    return 0
}
