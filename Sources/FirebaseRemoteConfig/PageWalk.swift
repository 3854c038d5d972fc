import WebClient

/// Walking a paged Google list by `nextPageToken`: the one rule of every list rollout reads (Remote Config's
/// versions, App Check's services). A token answered a second time, or more pages than the list can hold, is a
/// broken answer and an error naming `nextPageToken`, never a loop: a list that never ends would otherwise hold a
/// command (a kill's rollback among them) forever and repeat its entries.
struct PageWalk {
    /// What is listed, for the error (`listVersions`, `App Check services`).
    let what: String
    /// The most pages the list can have: Remote Config keeps at most 300 versions (so at most 300 pages, even of
    /// one version each); App Check's few services fit one page of 100.
    let maxPages: Int
    private(set) var pages = 0
    private var seen: Set<String> = []

    init(_ what: String, maxPages: Int) {
        self.what = what
        self.maxPages = maxPages
    }

    /// After each page: the token to ask for the next one with, nil at the end of the list; throws
    /// `FirebaseError.protocolViolation` on a token already seen or past `maxPages`.
    mutating func next(after token: String?) throws -> String? {
        pages += 1
        guard let token, !token.isEmpty else { return nil }
        guard seen.insert(token).inserted else {
            throw FirebaseError.protocolViolation(
                "Firebase's \(what) answered a nextPageToken it had already given ('\(token.prefix(40))'): a list that "
                    + "never ends; stopped after \(pages) pages")
        }
        guard pages < maxPages else {
            throw FirebaseError.protocolViolation(
                "Firebase's \(what) still answered a nextPageToken after \(pages) pages, more than the list can hold; "
                    + "stopped there")
        }
        return token
    }
}
