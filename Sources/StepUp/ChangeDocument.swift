import Crypto
import Rollout
import Timekeeping

/// The exact change a second factor approves, as canonical bytes: a security key signs their SHA-256 (the
/// client-data hash), a second operator approves the same bytes, and the audit record keeps them, so anyone can
/// later check who approved exactly what.
///
/// The encoding is one `key: value` line per field, in a fixed order, each ended by a line feed, after a first line
/// naming the format (`rollout-change/1`). Values are UTF-8 as given (no normalisation); a backslash, a line feed,
/// a carriage return and every other control character are escaped (`\\`, `\n`, `\r`, `\xHH`), so no value can end
/// its line early or forge another field. Percentages are exact (`Percent.format`: micro-percent, no rounding);
/// the expiry is whole Unix seconds. `canonicalBytes` is a pure function of the fields, and `init(canonical:)`
/// accepts only bytes that encode back to themselves, so a document read from an audit record is the one signed.
public struct ChangeDocument: Sendable, Equatable {
    /// The format's first line; a new layout gets a new number.
    public static let format = "rollout-change/1"
    /// The nonce's length in bytes.
    public static let nonceLength = 16

    /// Which store the change is for (its location as the operator named it, or a project id).
    public var store: String
    /// The version the change is applied to, and its ETag: a change approved on another base is another change.
    public var baseVersion: Int
    public var baseETag: String
    /// The rollout's parameter (`names.parameter`).
    public var parameter: String
    public var kind: StepUpChange.Kind
    /// The effective exposure before and after, in micro-percent (`StepUpChange.from`, `to`).
    public var from: Int64
    public var to: Int64
    /// The flags and what a non-percentage change touches (`StepUpChange.summary` after the exposure).
    public var detail: String
    public var reason: String
    /// The operator who asks for the change.
    public var operatorID: String
    /// Fresh random bytes per document: two approvals of the same change are two documents.
    public var nonce: [UInt8]
    /// After this instant the document approves nothing.
    public var expiresAt: Instant

    public init(
        store: String, baseVersion: Int, baseETag: String, parameter: String, kind: StepUpChange.Kind, from: Int64,
        to: Int64, detail: String, reason: String, operatorID: String, nonce: [UInt8], expiresAt: Instant
    ) {
        self.store = store
        self.baseVersion = baseVersion
        self.baseETag = baseETag
        self.parameter = parameter
        self.kind = kind
        self.from = from
        self.to = to
        self.detail = detail
        self.reason = reason
        self.operatorID = operatorID
        self.nonce = nonce
        self.expiresAt = expiresAt
    }

    /// The document of `proposal` in `store`, with a fresh nonce, approving until `expiresAt`.
    public init(_ proposal: Proposal, store: String, expiresAt: Instant, nonce: [UInt8] = SecureRandom.bytes(nonceLength)) {
        let change = StepUpChange(proposal)
        var flags: [String] = []
        if change.force { flags.append("--force") }
        if change.guardrailOverride { flags.append("--override-guardrail") }
        if change.protectionOverride { flags.append("--allow-rollout-change") }
        self.init(
            store: store, baseVersion: proposal.baseVersion ?? 0, baseETag: proposal.baseETag ?? "",
            parameter: proposal.parameter, kind: change.kind, from: change.from, to: change.to,
            detail: flags.joined(separator: " "), reason: proposal.reason, operatorID: proposal.actor, nonce: nonce,
            expiresAt: expiresAt)
    }

    /// The fields in their fixed order, values unescaped.
    public var fields: [(key: String, value: String)] {
        [
            ("store", store), ("base-version", String(baseVersion)), ("base-etag", baseETag), ("parameter", parameter),
            ("change", kind.rawValue), ("from", Percent.format(from)), ("to", Percent.format(to)), ("flags", detail),
            ("reason", reason), ("operator", operatorID), ("nonce", Hex.encode(nonce)),
            ("expires", String(expiresAt.seconds)),
        ]
    }

    /// The canonical bytes (see the type's documentation).
    public var canonicalBytes: [UInt8] {
        var out = Array((Self.format + "\n").utf8)
        for (key, value) in fields {
            out += Array(key.utf8)
            out += [0x3A, 0x20]
            out += Self.escape(value)
            out.append(0x0A)
        }
        return out
    }

    /// SHA-256 of the canonical bytes: what a security key signs as the client-data hash.
    public var clientDataHash: [UInt8] { SHA256.hash(canonicalBytes) }

    /// The document as it reads, one field a line (the canonical text, which is printable by construction).
    public var text: String { String(decoding: canonicalBytes, as: UTF8.self) }

    /// The one-line summary of what is approved: `set 10% -> 100% of rollout_enabled on version 41`.
    public var summary: String {
        var s = "\(kind.rawValue) \(Percent.format(from)) -> \(Percent.format(to)) of \(parameter) on version \(baseVersion)"
        if !detail.isEmpty { s += " " + detail }
        return s
    }

    /// The id of a two-person request: the first 8 bytes of the document's nonce, in hex.
    public static func requestID(_ document: ChangeDocument) -> String { Hex.encode(document.nonce.prefix(8)) }

    /// The longest a document rollout makes may still have to live when checked: a two-person request's 15
    /// minutes, and a minute for the clocks of two machines.
    public static let longestLifetime: Instant.Duration = .minutes(16)

    /// Whether `now` is before the expiry, and the expiry no further ahead than any document rollout makes: an
    /// assertion over a document with a distant expiry (signed outside rollout, or kept unsent) would otherwise
    /// stay usable for as long as its base version does.
    public func isValid(at now: Instant) -> Bool { now < expiresAt && expiresAt <= now + Self.longestLifetime }

    /// Reads a document back from its canonical bytes; nil unless the bytes are exactly a document's encoding.
    public init?(canonical bytes: [UInt8]) {
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
        guard lines.last == [], lines.count == 14, String(decoding: lines[0], as: UTF8.self) == Self.format else { return nil }
        lines.removeLast()
        var values: [String] = []
        let keys = ["store", "base-version", "base-etag", "parameter", "change", "from", "to", "flags", "reason",
            "operator", "nonce", "expires"]
        for (i, key) in keys.enumerated() {
            let line = lines[i + 1]
            let prefix = Array(key.utf8) + [0x3A, 0x20]
            guard line.starts(with: prefix), let value = Self.unescape(Array(line.dropFirst(prefix.count))) else {
                return nil
            }
            values.append(value)
        }
        guard let version = Int(values[1]), let kind = StepUpChange.Kind(rawValue: values[4]),
            let from = Percent.parse(values[5]), let to = Percent.parse(values[6]),
            let nonce = Hex.decode(values[10]), nonce.count == Self.nonceLength, let expires = Int64(values[11])
        else { return nil }
        self.init(
            store: values[0], baseVersion: version, baseETag: values[2], parameter: values[3], kind: kind, from: from,
            to: to, detail: values[7], reason: values[8], operatorID: values[9], nonce: nonce,
            expiresAt: Instant(seconds: expires))
        guard canonicalBytes == bytes else { return nil }
    }

    /// A value's bytes with `\`, line breaks and other control characters escaped.
    static func escape(_ value: String) -> [UInt8] {
        var out: [UInt8] = []
        for b in value.utf8 {
            switch b {
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, 0x6E]
            case 0x0D: out += [0x5C, 0x72]
            case 0..<0x20, 0x7F: out += Array("\\x".utf8) + Array(Hex.encode([b]).utf8)
            default: out.append(b)
            }
        }
        return out
    }

    /// The inverse of `escape`; nil for an escape `escape` never writes or for invalid UTF-8.
    static func unescape(_ bytes: [UInt8]) -> String? {
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b < 0x20 || b == 0x7F { return nil }
            guard b == 0x5C else {
                out.append(b)
                i += 1
                continue
            }
            guard i + 1 < bytes.count else { return nil }
            switch bytes[i + 1] {
            case 0x5C: out.append(0x5C); i += 2
            case 0x6E: out.append(0x0A); i += 2
            case 0x72: out.append(0x0D); i += 2
            case 0x78:
                guard i + 3 < bytes.count, let v = Hex.decode(String(decoding: bytes[(i + 2)...(i + 3)], as: UTF8.self)),
                    v.count == 1, v[0] < 0x20 || v[0] == 0x7F, v[0] != 0x0A, v[0] != 0x0D
                else { return nil }
                out.append(v[0])
                i += 4
            default: return nil
            }
        }
        guard let s = String(validating: out, as: UTF8.self) else { return nil }
        return s
    }
}
