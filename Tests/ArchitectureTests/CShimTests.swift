import Foundation
import TestSupport
import Testing

/// A C shim's header holds no storage and loads nothing: a library opened with dlopen is a C target whose shim.c
/// defines the one table of its functions and the loader. Swift compiles each source file of a module into an
/// object of its own, so a static in a header (even a function-local one of a static inline function) is one copy
/// per object, and only the loading object's copy is ever filled; -O code inlined into another file called through
/// an empty copy (a release `rollout` crashed on every PostgreSQL store). The debug build the tests run cannot
/// show it, so the headers are read here.
@Suite struct CShimTests {
    /// Headers allowed a static variable, and why it is safe there.
    static let allowed = [
        // The digests its ENGINE hands out: linked, not loaded; the function that writes them takes the address
        // of the callback that reads them, so the written copy and the read one are always the same object's.
        "COpenSSL/shim.h"
    ]

    @Test func noShimHeaderHoldsStorageOrLoadsALibrary() throws {
        let sources = TestSupport.packageRoot.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(atPath: sources.path)?.compactMap { $0 as? String } ?? []
        let headers = files.filter { $0.hasSuffix(".h") }
        for header in headers {
            let text = try String(contentsOf: sources.appendingPathComponent(header), encoding: .utf8)
            let staticAllowed = Self.allowed.contains(header)
            let found = Self.storageOrLoading(text).filter { !staticAllowed || $0.contains("dlopen(") }
            #expect(found.isEmpty, "Sources/\(header) holds storage or loads a library (move it to shim.c): \(found)")
        }
        // The walk found the dlopen shims' headers (a walk that finds nothing must not pass).
        for shim in ["CCurl", "CMicroHTTPD", "CPostgres", "CQRencode"] {
            #expect(headers.contains("\(shim)/include/shim.h"), "no Sources/\(shim)/include/shim.h among \(headers)")
        }
    }

    /// The check above sees the pattern it exists for, and passes a header's wrappers over an extern table.
    @Test func theCheckSeesAHeaderStatic() {
        let old = """
            static inline rollout_curl_api *rollout_curl_table(void) {
                static rollout_curl_api api;
                return &api;
            }
            static inline int rollout_curl_load(void) {
                void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
            """
        #expect(
            Self.storageOrLoading(old) == [
                "static rollout_curl_api api;", #"void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);"#,
            ])
        let new = """
            // Loaded with dlopen on first use; a static in this header would be one copy per object.
            extern rollout_curl_api rollout_curl_api_table;
            int rollout_curl_load(void);
            static inline CURL *rollout_curl_easy_init(void) { return rollout_curl_api_table.easy_init(); }
            """
        #expect(Self.storageOrLoading(new).isEmpty)
    }

    /// The lines of a C header (comments aside) that declare a static variable or call dlopen.
    static func storageOrLoading(_ header: String) -> [String] {
        header.split(separator: "\n").compactMap { line in
            let code = line.components(separatedBy: "//")[0].trimmingCharacters(in: .whitespaces)
            let words = code.split(whereSeparator: { !$0.isLetter && !$0.isNumber && $0 != "_" })
            let staticVariable = words.first == "static" && words.dropFirst().first != "inline"
            return staticVariable || code.contains("dlopen(") ? code : nil
        }
    }
}
