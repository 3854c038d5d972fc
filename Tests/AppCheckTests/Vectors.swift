import AppCheck
import Crypto
import Foundation
import TestSupport
import Timekeeping

/// One real attestation from ../shared/vectors/appattest/, with its assertions.
struct AppAttestVector: Sendable, CustomStringConvertible {
    struct Assertion: Sendable {
        var name: String
        var bytes: [UInt8]
        var clientDataHash: [UInt8]
        /// The raw client data (what pyattest takes), nil when the vector gives the hash itself.
        var clientData: [UInt8]?
        var expectedCounter: UInt32
        var previousCounter: UInt32
    }

    var name: String
    var attestation: [UInt8]
    var keyId: [UInt8]
    var clientDataHash: [UInt8]
    var clientData: [UInt8]?
    var app: AppIdentity
    var environment: AppAttestEnvironment
    var verifyAt: Instant
    var leafNotBefore: Instant
    var leafNotAfter: Instant
    var assertions: [Assertion]
    var description: String { name }

    static let names = ["apple-guide-2024", "veehaitch-ios-14.4", "webauthn4j-kayak-2020"]

    static func all() throws -> [AppAttestVector] { try names.map(load) }

    static func load(_ name: String) throws -> AppAttestVector {
        let url = try TestSupport.vector("appattest/\(name).json")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as! [String: Any]
        func b64(_ v: Any?) -> [UInt8] { Base64.decode(v as! String)! }
        func time(_ v: Any?) -> Instant { ISO8601.parse(v as! String)! }
        func hashAndData(_ c: [String: Any]) -> ([UInt8], [UInt8]?) {
            let value = b64(c["value_b64"])
            switch c["kind"] as! String {
            case "client_data_hash_raw": return (value, nil)
            case "sha256_of_client_data": return (SHA256.hash(value), value)
            default: fatalError("unknown client data kind in \(name)")
            }
        }
        let (hash, data) = hashAndData(json["client_data_hash_or_challenge"] as! [String: Any])
        let assertions = (json["assertions"] as! [[String: Any]]).map { a -> Assertion in
            let (h, d) = hashAndData(a["client_data_hash_or_challenge"] as! [String: Any])
            return Assertion(
                name: a["name"] as! String, bytes: b64(a["assertion_b64"]), clientDataHash: h, clientData: d,
                expectedCounter: UInt32(a["expected_counter"] as! Int),
                previousCounter: UInt32(a["previous_counter"] as! Int))
        }
        return AppAttestVector(
            name: name, attestation: b64(json["attestation_b64"]), keyId: b64(json["key_id_b64"]), clientDataHash: hash,
            clientData: data,
            app: AppIdentity(teamId: json["team_id"] as! String, bundleId: json["bundle_id"] as! String),
            environment: AppAttestEnvironment(rawValue: json["environment"] as! String)!,
            verifyAt: time(json["verify_at_time"]),
            leafNotBefore: time(json["leaf_cert_not_before"]), leafNotAfter: time(json["leaf_cert_not_after"]),
            assertions: assertions)
    }
}
