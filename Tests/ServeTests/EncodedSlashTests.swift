import Testing

@testable import ExchangeServer

/// The refusal of an encoded slash or NUL scans the raw path's bytes: it must find exactly what a search of the
/// lower-cased path for `%2f` or `%00` finds.
@Suite struct EncodedSlashTests {
    @Test("the byte scan finds %2F, %2f and %00 where a lower-cased search does, and nothing else")
    func scanAgreesWithALowerCasedSearch() {
        let paths = [
            "/v1/projects/p/apps/a:generateAppAttestChallenge", "/v1/projects/P%2Fapps/APP:x", "/a%2fb", "%2F", "%2",
            "%", "/a%25/2f", "/a%%2F", "/a%2Gf", "/é%2F", "/%2E%2F", "/%2e", "/%32F", "/a%2", "", "/%F2",
            "/healthz%00/../x", "%00", "%0", "/%0%00", "/%000", "/%0 0", "/%20%30", "/%01", "/%10",
        ]
        for path in paths {
            let lower = path.lowercased()
            #expect(
                HTTPServer.hasRefusedEscape(path.utf8) == (lower.contains("%2f") || lower.contains("%00")), "\(path)")
        }
    }
}
