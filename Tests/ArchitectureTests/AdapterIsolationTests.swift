import Foundation
import TestSupport
import Testing

/// Adapters never import each other (STYLE.md; swift-nio's NIOPosix and NIOEmbedded both depend on NIOCore, never
/// on each other): what two backends share is a port of the core or StoreSupport. Checked on Package.swift, so the
/// compiler enforces it, and on the adapters' sources, so an `import` cannot creep back in beside a dependency.
@Suite struct AdapterIsolationTests {
    static let adapters = ["SQLiteStore", "PostgresStore", "FirebaseRemoteConfig", "ExchangeServer", "GoogleDataSources", "SecurityKey", "PhoneVerification"]

    @Test func noAdapterDependsOnAnotherInPackageSwift() throws {
        let manifest = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let targets = Self.targetDependencies(manifest)
        // The parse found the adapters and their dependencies (a parse that finds nothing must not pass).
        for adapter in Self.adapters {
            let direct = try #require(targets[adapter], "no target \(adapter) in Package.swift")
            #expect(direct.contains("Platform"), "\(adapter)'s dependencies were not read: \(direct)")
        }
        for adapter in Self.adapters {
            let reached = Self.closure(of: adapter, in: targets)
            let others = reached.intersection(Self.adapters).subtracting([adapter])
            #expect(others.isEmpty, "\(adapter) depends on the adapter(s) \(others.sorted()) (Package.swift)")
        }
    }

    @Test func noAdapterSourceImportsAnother() throws {
        let sources = TestSupport.packageRoot.appendingPathComponent("Sources")
        for adapter in Self.adapters {
            let directory = sources.appendingPathComponent(adapter)
            let files = try #require(FileManager.default.enumerator(atPath: directory.path)).compactMap {
                $0 as? String
            }
            .filter { $0.hasSuffix(".swift") }
            #expect(!files.isEmpty, "no sources under \(directory.path)")
            for file in files {
                let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                for line in text.split(separator: "\n") {
                    guard let imported = Self.importedModule(String(line)) else { continue }
                    #expect(
                        imported == adapter || !Self.adapters.contains(imported),
                        "Sources/\(adapter)/\(file) imports the adapter \(imported)")
                }
            }
        }
    }

    /// The checks above would catch the dependency this suite exists for (the parse and the import reader see it).
    @Test func theChecksSeeAnAdapterDependency() {
        let manifest = """
            .target(name: "Platform"),
            .target(name: "SQLiteStore", dependencies: ["Platform"]),
            .target(name: "Bridge", dependencies: ["SQLiteStore"]),
            .target(
                name: "PostgresStore",
                dependencies: ["Platform", "Bridge"],
                swiftSettings: strict + [.unsafeFlags(["-Onone"], .when(configuration: .release))]),
            """
        let targets = Self.targetDependencies(manifest)
        #expect(targets["PostgresStore"] == ["Platform", "Bridge"])
        #expect(Self.closure(of: "PostgresStore", in: targets).contains("SQLiteStore"))
        #expect(Self.importedModule("@testable import PostgresStore") == "PostgresStore")
        #expect(Self.importedModule("@_exported import struct ExchangeServer.EventsIntake") == "ExchangeServer")
        #expect(Self.importedModule("    import FirebaseRemoteConfig // state") == "FirebaseRemoteConfig")
        #expect(Self.importedModule("// import PostgresStore") == nil)
    }

    /// Every target of a Package.swift text (`.target(`, `.testTarget(`, `.executableTarget(`, `.systemLibrary(`)
    /// and the names in its `dependencies: [...]`.
    static func targetDependencies(_ manifest: String) -> [String: [String]] {
        var out: [String: [String]] = [:]
        let text = Array(manifest.unicodeScalars)
        var i = 0
        let openers = [".target(", ".testTarget(", ".executableTarget(", ".systemLibrary("].map {
            Array($0.unicodeScalars)
        }
        while i < text.count {
            guard
                let opener = openers.first(where: { i + $0.count <= text.count && Array(text[i..<i + $0.count]) == $0 })
            else {
                i += 1
                continue
            }
            // The call's arguments, up to its matching parenthesis (strings skipped).
            var depth = 0
            var j = i + opener.count - 1
            var inString = false
            repeat {
                let c = text[j]
                if c == "\"" {
                    inString.toggle()
                } else if !inString && c == "(" {
                    depth += 1
                } else if !inString && c == ")" {
                    depth -= 1
                }
                j += 1
            } while depth > 0 && j < text.count
            let call = String(String.UnicodeScalarView(text[i..<j]))
            if let name = Self.firstMatch(#"name:\s*"([^"]+)""#, in: call) {
                let list = Self.firstMatch(#"dependencies:\s*\[([^\]]*)\]"#, in: call) ?? ""
                out[name] = Self.allMatches(#""([^"]+)""#, in: list)
            }
            i = j
        }
        return out
    }

    /// The targets `target` reaches through its dependencies, itself included.
    static func closure(of target: String, in targets: [String: [String]]) -> Set<String> {
        var reached: Set<String> = [target]
        var queue = [target]
        while let next = queue.popLast() {
            for d in targets[next] ?? [] where reached.insert(d).inserted { queue.append(d) }
        }
        return reached
    }

    /// The module an `import` line imports (`import X`, `@testable import X`, `import struct X.Y`), else nil.
    static func importedModule(_ line: String) -> String? {
        firstMatch(
            #"^\s*(?:@\w+\s+)*import\s+(?:(?:typealias|struct|class|enum|protocol|let|var|func)\s+)?(\w+)"#, in: line)
    }

    static func firstMatch(_ pattern: String, in text: String) -> String? {
        allMatches(pattern, in: text).first
    }

    static func allMatches(_ pattern: String, in text: String) -> [String] {
        guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
        let range = NSRange(text.startIndex..., in: text)
        return regex.matches(in: text, range: range).compactMap { m in
            Range(m.range(at: 1), in: text).map { String(text[$0]) }
        }
    }
}
