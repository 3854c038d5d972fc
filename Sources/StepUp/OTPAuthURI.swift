/// The `otpauth://totp/...` URI an authenticator app scans to add an account (the "Key URI Format").
///
/// Shape: `otpauth://totp/ISSUER:ACCOUNT?secret=BASE32&issuer=ISSUER&algorithm=SHA1&digits=6&period=30`.
/// The label's issuer and account are percent-encoded (RFC 3986) except for unreserved characters and, in the
/// account, `@` (as in the common `name@example.com`), so a literal `:` only ever separates the two; the query
/// value encodes every character but the unreserved ones, so `&`, `=`, `+` and spaces cannot break the query.
/// The parameters that apps assume by default are written anyway, so no app has to guess.
///
/// The value holds the secret: its `description` is redacted and only `absoluteString` spells it out.
public struct OTPAuthURI: Sendable, CustomStringConvertible {
    public var secret: TOTPSecret
    public var issuer: String
    public var account: String
    public var totp: TOTP

    public init(secret: TOTPSecret, issuer: String, account: String, totp: TOTP = .standard) {
        self.secret = secret
        self.issuer = issuer
        self.account = account
        self.totp = totp
    }

    /// The full URI, secret included: show it once at enrolment and nowhere else.
    public var absoluteString: String { text(secret: secret.base32) }

    public var description: String { text(secret: "<redacted>") }

    private func text(secret: String) -> String {
        let label =
            Self.percentEncode(issuer, keeping: []) + ":" + Self.percentEncode(account, keeping: [UInt8(ascii: "@")])
        return "otpauth://totp/\(label)?secret=\(secret)&issuer=\(Self.percentEncode(issuer, keeping: []))"
            + "&algorithm=SHA1&digits=\(totp.digits)&period=\(totp.period)"
    }

    /// Percent-encodes the UTF-8 bytes of `text`, keeping RFC 3986's unreserved characters and `keeping`.
    static func percentEncode(_ text: String, keeping extra: Set<UInt8>) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for b in text.utf8 {
            switch b {
            case 65...90, 97...122, 48...57, 45, 46, 95, 126: out.append(b)
            case _ where extra.contains(b): out.append(b)
            default: out += [37, hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
