import Foundation
import Testing
@testable import WebClient

/// `WebURL.checkScheme` reads a URL's scheme and host without Foundation (the program no longer links it); the
/// reading is checked here against Foundation's `URLComponents` on the URLs an operator gives and on broken ones.
struct WebURLTests {
    static let urls = [
        "https://firebaseremoteconfig.googleapis.com", "https://firebaseremoteconfig.googleapis.com/v1/projects/p",
        "http://127.0.0.1:8080/v1", "http://[::1]:9000/x", "http://localhost", "HTTPS://Example.COM/", "http://user:pw@127.0.0.1:1/",
        "https://h:443?x=1", "https://h#frag", "http://10.0.0.1/", "ftp://h/", "https://", "https:///path", "no scheme",
        "https//missing-colon", "https:/one-slash", "://h", "1http://h", "https://h:port/", "https://h:80x", "https://ex ample.com",
        "https://h/pa th", "https://h/\u{7F}", "https://ü.example", "https://[::1", "https://[::1]x/", "mailto:a@b", "",
        "http://127.0.0.1.evil.com/", "http://127.0.0.1@evil.com/", "h+t.t-p://host/",
    ]

    @Test func theSchemeAndHostAreURLComponents() {
        for url in Self.urls {
            let ours = WebURL.authority(of: url)
            let c = URLComponents(string: url)
            // Foundation's host drops an IPv6 literal's brackets; the check trims them either way.
            let theirs = c.flatMap { c in
                c.scheme.map { s in (s.lowercased(), (c.host ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "[]"))) }
            }
            if let theirs, !theirs.1.isEmpty {
                #expect(ours?.scheme == theirs.0, "\(url)")
                #expect(ours?.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")) == theirs.1, "\(url)")
            } else {
                #expect(ours == nil || ours!.host.isEmpty, "\(url): ours \(String(describing: ours))")
            }
        }
    }

    @Test func onlyHTTPSOrLoopbackHTTPPasses() {
        for ok in ["https://x.example", "http://127.0.0.1:8080", "http://[::1]/", "http://localhost:1"] {
            #expect(throws: Never.self) { try WebURL.checkScheme(ok, what: "the URL") }
        }
        for bad in ["http://10.0.0.1", "http://127.0.0.1.evil.com", "http://127.0.0.1@evil.com", "ftp://h", "x", "https://"] {
            #expect(throws: FirebaseError.self) { try WebURL.checkScheme(bad, what: "the URL") }
        }
    }
}
