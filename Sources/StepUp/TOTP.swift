import Crypto
import Timekeeping

/// The shared key of one operator's authenticator: raw bytes that never print.
///
/// Its `description`, `debugDescription` and mirror are redacted, so that a secret cannot leak through string
/// interpolation, `dump`, a log line, an error message or a JSON encoder that reflects over properties. The
/// bytes and the base32 form are reachable only through the explicitly named `bytes` and `base32`, which
/// enrolment (the `otpauth://` URI) and the store use.
public struct TOTPSecret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The length RFC 4226 §4 recommends: 160 bits, the output size of SHA-1.
    public static let recommendedByteCount = 20

    public let bytes: [UInt8]

    /// Wraps existing key bytes (from the store, or the RFC's test key).
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Decodes a base32 secret as authenticator apps show it; nil when it is not base32 or is empty.
    public init?(base32 text: String) {
        guard let b = Base32.decode(text), !b.isEmpty else { return nil }
        bytes = b
    }

    /// A fresh secret from libcrypto's random generator.
    public static func generate(byteCount: Int = recommendedByteCount) -> TOTPSecret {
        TOTPSecret(bytes: SecureRandom.bytes(byteCount))
    }

    /// The unpadded upper-case base32 form that goes into the `otpauth://` URI.
    public var base32: String { Base32.encode(bytes) }

    public static func == (a: TOTPSecret, b: TOTPSecret) -> Bool { constantTimeEquals(a.bytes, b.bytes) }

    public var description: String { "TOTPSecret(redacted)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

/// Time-based one-time passwords (RFC 6238) over HMAC-SHA-1 (RFC 4226), computed with libcrypto.
///
/// The time step is `floor(unixSeconds / period)`, written as an 8-byte big-endian counter; the HMAC is cut to
/// 31 bits by dynamic truncation (offset = low nibble of the last byte) and reduced modulo `10^digits`. The
/// defaults (6 digits, 30 seconds) are what every authenticator app assumes; the RFC's Appendix B vectors use
/// 8 digits.
public struct TOTP: Sendable, Equatable {
    public let digits: Int
    public let period: Int64

    /// The parameters authenticator apps assume: 6 digits every 30 seconds.
    public static let standard = TOTP(uncheckedDigits: 6, period: 30)

    /// A generator with `digits` (6...8, RFC 4226 §5.3) and `period` seconds (at least 1).
    public init(digits: Int = 6, period: Int64 = 30) throws(TOTPParameterError) {
        guard (6...8).contains(digits) else { throw TOTPParameterError("TOTP codes have 6 to 8 digits, not \(digits)") }
        guard period >= 1 else { throw TOTPParameterError("a TOTP period is at least 1 second, not \(period)") }
        self.init(uncheckedDigits: digits, period: period)
    }

    private init(uncheckedDigits digits: Int, period: Int64) {
        self.digits = digits
        self.period = period
    }

    /// The time step that contains `instant` (floor division, so instants before 1970 are handled too).
    public func step(at instant: Instant) -> Int64 {
        let s = instant.seconds
        return s >= 0 ? s / period : -((-s + period - 1) / period)
    }

    /// The instant at which `step` begins.
    public func start(ofStep step: Int64) -> Instant { Instant(seconds: step * period) }

    /// The code for time step `step` (the HOTP value of RFC 4226 with the step as counter), zero-padded.
    public func code(secret: TOTPSecret, step: Int64) -> String {
        let counter = UInt64(bitPattern: step)
        let message: [UInt8] = (0..<8).map { UInt8(truncatingIfNeeded: counter >> (56 - 8 * UInt64($0))) }
        let mac = HMAC.authenticate(.sha1, key: secret.bytes, message: message)
        let offset = Int(mac[mac.count - 1] & 0x0F)
        let truncated =
            UInt32(mac[offset] & 0x7F) << 24 | UInt32(mac[offset + 1]) << 16 | UInt32(mac[offset + 2]) << 8
            | UInt32(mac[offset + 3])
        var modulus: UInt32 = 1
        for _ in 0..<digits { modulus *= 10 }
        let value = String(truncated % modulus)
        return String(repeating: "0", count: digits - value.count) + value
    }

    /// The code valid at `instant`.
    public func code(secret: TOTPSecret, at instant: Instant) -> String {
        code(secret: secret, step: step(at: instant))
    }
}

/// TOTP parameters outside what RFC 4226/6238 allow.
public struct TOTPParameterError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
