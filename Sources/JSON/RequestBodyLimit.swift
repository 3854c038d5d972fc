/// The largest request and file bodies read, in bytes, so that no body can grow memory without bound.
///
/// For the HTTP endpoints to come and for the files read today: a body over its limit is refused before it is
/// parsed (and, over HTTP, before it is read whole: compare `Content-Length`, then stop reading at the limit).
public enum RequestBodyLimit {
    /// A Remote Config template (publish, import, `template set`): Firebase's quotas (3,000 parameters,
    /// 2,000 conditions, 1,000,000 characters of values) keep real templates to a few megabytes.
    public static let template = 8 << 20
    /// An App Check exchange request (an attestation object is about 5 KB, an assertion a few hundred bytes,
    /// base64 adds a third).
    public static let appCheckExchange = 64 << 10
    /// Any other JSON request.
    public static let `default` = 1 << 20
}
