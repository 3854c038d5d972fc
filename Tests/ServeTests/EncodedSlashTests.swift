import Testing

@testable import ExchangeServer

/// The encoded-slash refusal scans the raw path's bytes: it must find exactly what a search of the lower-cased
/// path for `%2f` finds.
@Suite struct EncodedSlashTests {
    @Test("the byte scan finds %2F and %2f where a lower-cased search does, and nothing else")
    func scanAgreesWithALowerCasedSearch() {
        let paths = [
            "/v1/projects/p/apps/a:generateAppAttestChallenge", "/v1/projects/P%2Fapps/APP:x", "/a%2fb", "%2F", "%2",
            "%", "/a%25/2f", "/a%%2F", "/a%2Gf", "/é%2F", "/%2E%2F", "/%2e", "/%32F", "/a%2", "", "/%F2",
        ]
        for path in paths {
            #expect(HTTPServer.hasEncodedSlash(path.utf8) == path.lowercased().contains("%2f"), "\(path)")
        }
    }
}
