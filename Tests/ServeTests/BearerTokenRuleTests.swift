import ExchangeServer
import Testing

/// Which `Authorization` headers `BearerToken` admits, on made-up requests: the scheme in any case after any
/// spaces, one space, then the token with spaces around it trimmed. Through the real server: `IntakeAndKeysTests`.
@Suite struct BearerTokenRuleTests {
    let token = BearerToken("tok-0123456789")

    func admits(_ header: String?) -> Bool {
        let headers = header.map { ["authorization": $0] } ?? [:]
        return token.admits(HTTPRequest(method: "POST", path: "/v1/events", headers: headers))
    }

    @Test func theSchemeInAnyCaseThenTheToken() {
        for header in [
            "Bearer tok-0123456789", "bearer tok-0123456789", "BEARER tok-0123456789", "  Bearer tok-0123456789",
            "Bearer  tok-0123456789 ", "bEaReR tok-0123456789",
        ] {
            #expect(admits(header), "\(header)")
        }
    }

    @Test func anythingElseIsRefused() {
        for header in [
            nil, "", " ", "Bearer", "Bearer ", "Bearer  ", "Bearertok-0123456789", "Basic tok-0123456789",
            "Bearerx tok-0123456789", "Bear tok-0123456789", "Bearer tok-0123456789x", "Bearer tok-012345678",
            "Bearer tok 0123456789", "tok-0123456789", "Bearer\ttok-0123456789", "Ｂearer tok-0123456789",
        ] {
            #expect(!admits(header), "\(String(describing: header))")
        }
    }
}
