import COpenSSL

/// The App Attest nonce extension of a credential certificate (OID 1.2.840.113635.100.8.2).
///
/// Its value is DER `SEQUENCE { [1] EXPLICIT OCTET STRING (32 bytes) }`. It is parsed as DER with libcrypto's
/// tag reader, never sliced at a fixed offset: a slice would accept a certificate whose extension has another
/// shape but happens to carry the right bytes at byte 6. libcrypto's reader takes BER, so each header is also
/// checked to be DER's one minimal encoding (a long-form length where the short form fits is refused).
public enum AppAttestNonceExtension {
    public static let oid = "1.2.840.113635.100.8.2"

    /// Why the extension's DER was refused.
    public struct Malformed: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// The nonce inside an extension value.
    public static func nonce(fromExtensionValue der: [UInt8]) throws(Malformed) -> [UInt8] {
        try der.withUnsafeBufferPointer { buf throws(Malformed) -> [UInt8] in
            guard let base = buf.baseAddress else { throw Malformed(reason: "empty extension value") }
            var p: UnsafePointer<UInt8>? = base
            let end = base + buf.count

            let sequence = try element(&p, end: end, base: base)
            guard sequence.universal, sequence.tag == V_ASN1_SEQUENCE, sequence.constructed else {
                throw Malformed(reason: "extension value is not a SEQUENCE")
            }
            guard p! + sequence.length == end else { throw Malformed(reason: "bytes after the SEQUENCE") }

            var nonce: [UInt8]?
            while p! < end {
                let field = try element(&p, end: end, base: base)
                let fieldEnd = p! + field.length
                guard field.contextSpecific, field.tag == 1 else {
                    p = fieldEnd
                    continue
                }
                guard nonce == nil else { throw Malformed(reason: "more than one [1] field") }
                guard field.constructed else { throw Malformed(reason: "[1] is not EXPLICIT (constructed)") }
                let octets = try element(&p, end: fieldEnd, base: base)
                guard octets.universal, octets.tag == V_ASN1_OCTET_STRING, !octets.constructed else {
                    throw Malformed(reason: "[1] does not hold an OCTET STRING")
                }
                guard p! + octets.length == fieldEnd else {
                    throw Malformed(reason: "bytes after the OCTET STRING in [1]")
                }
                guard octets.length == 32 else { throw Malformed(reason: "nonce is \(octets.length) bytes, not 32") }
                nonce = Array(UnsafeBufferPointer(start: p!, count: 32))
                p = fieldEnd
            }
            guard let nonce else { throw Malformed(reason: "no [1] field holding the nonce") }
            return nonce
        }
    }

    /// The extension value for `nonce`, exactly as Apple encodes it (`30 24 A1 22 04 20 ‖ nonce`).
    public static func extensionValue(nonce: [UInt8]) -> [UInt8] {
        precondition(nonce.count == 32, "an App Attest nonce is a SHA-256 digest")
        return [0x30, 0x24, 0xa1, 0x22, 0x04, 0x20] + nonce
    }

    private struct Element {
        var tag: Int32
        var tagClass: Int32
        var constructed: Bool
        var length: Int
        var universal: Bool { tagClass == V_ASN1_UNIVERSAL }
        var contextSpecific: Bool { tagClass == V_ASN1_CONTEXT_SPECIFIC }
    }

    /// Reads one DER header at `p` (which then points at the content); the content must fit before `end`, and
    /// the header must be in DER's minimal form. `base` is the start of the value, for the error's offset.
    private static func element(
        _ p: inout UnsafePointer<UInt8>?, end: UnsafePointer<UInt8>, base: UnsafePointer<UInt8>
    ) throws(Malformed) -> Element {
        guard let start = p, start < end else { throw Malformed(reason: "truncated DER") }
        var length = 0
        var tag: Int32 = 0
        var tagClass: Int32 = 0
        let flags = ASN1_get_object(&p, &length, &tag, &tagClass, end - start)
        // 0x80: error (including a length past `end`); 0x01 with constructed: indefinite length, not DER.
        guard flags & 0x80 == 0, flags & 0x01 == 0, let q = p, q + length <= end else {
            ERR_clear_error()
            throw Malformed(reason: "invalid DER element")
        }
        // libcrypto's reader takes BER; DER has exactly one encoding of each header (X.690 §10.1): the tag in
        // the short form below 31, the length in the short form below 128 and otherwise in the fewest bytes.
        let header = q - start
        guard header == derHeaderSize(tag: tag, length: length) else {
            throw Malformed(
                reason: "the element at byte \(start - base) has a \(header)-byte header where DER uses "
                    + "\(derHeaderSize(tag: tag, length: length)) (a non-minimal tag or length)")
        }
        return Element(tag: tag, tagClass: tagClass, constructed: flags & V_ASN1_CONSTRUCTED != 0, length: length)
    }

    /// The size of the DER identifier and length octets for `tag` and `length`.
    static func derHeaderSize(tag: Int32, length: Int) -> Int {
        var tagBytes = 1
        if tag >= 31 {
            var t = tag
            while t > 0 {
                tagBytes += 1
                t >>= 7
            }
        }
        var lengthBytes = 1
        if length >= 128 {
            var l = length
            while l > 0 {
                lengthBytes += 1
                l >>= 8
            }
        }
        return tagBytes + lengthBytes
    }
}
