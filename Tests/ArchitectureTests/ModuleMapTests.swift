import Foundation
import TestSupport
import Testing

/// docs/ARCHITECTURE.md's module graph is Package.swift's: the block between its markers is generated from the
/// manifest (on a mismatch the test prints the block to paste), so the map cannot drift from the build.
@Suite struct ModuleMapTests {
    static let begin = "<!-- module graph: generated from Package.swift, checked by Tests/ArchitectureTests -->"
    static let end = "<!-- end of module graph -->"

    /// The modules of `Sources/` (not the C shims, which are module maps: a system library's, or a C target's in
    /// its `include/`) by layer: a module's layer is one more than its highest dependency's; each line lists a
    /// module's direct dependencies among them.
    static func graph(_ targets: [String: [String]]) -> String {
        let sources = TestSupport.packageRoot.appendingPathComponent("Sources")
        let modules = Set(targets.keys.filter { name in
            FileManager.default.fileExists(atPath: sources.appendingPathComponent(name).path)
                && !["module.modulemap", "include/module.modulemap"].contains { map in
                    FileManager.default.fileExists(atPath: sources.appendingPathComponent("\(name)/\(map)").path)
                }
        })
        var layer: [String: Int] = [:]
        func depth(_ m: String, _ seen: Set<String> = []) -> Int {
            if let d = layer[m] { return d }
            let deps = (targets[m] ?? []).filter { modules.contains($0) && !seen.contains($0) }
            let d = deps.map { depth($0, seen.union([m])) + 1 }.max() ?? 0
            layer[m] = d
            return d
        }
        var lines: [String] = []
        for m in modules.sorted() { _ = depth(m) }
        for l in 0...(layer.values.max() ?? 0) {
            for m in modules.filter({ layer[$0] == l }).sorted() {
                let deps = (targets[m] ?? []).filter(modules.contains).sorted()
                lines.append("\(l)  \(m)" + (deps.isEmpty ? "" : " → " + deps.joined(separator: ", ")))
            }
        }
        return lines.joined(separator: "\n")
    }

    @Test func theDocumentedGraphIsPackageSwifts() throws {
        let manifest = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let expected = Self.graph(AdapterIsolationTests.targetDependencies(manifest))
        #expect(expected.contains("Rollout →") && expected.contains("RolloutApp →"), "the parse found no modules")
        let doc = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("docs/ARCHITECTURE.md"), encoding: .utf8)
        guard let b = doc.range(of: Self.begin), let e = doc.range(of: Self.end, range: b.upperBound..<doc.endIndex) else {
            Issue.record("docs/ARCHITECTURE.md has no module graph markers")
            return
        }
        let block = doc[b.upperBound..<e.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "```text\n", with: "").replacingOccurrences(of: "\n```", with: "")
        #expect(block == expected, "paste this between the markers of docs/ARCHITECTURE.md:\n```text\n\(expected)\n```")
    }

    /// Every library module of Sources/ has tests of its own: some test target (`…Tests`) depends on it directly.
    @Test func everyModuleHasATestTarget() throws {
        let manifest = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let targets = AdapterIsolationTests.targetDependencies(manifest)
        let modules = Self.graph(targets).split(separator: "\n")
            .compactMap { $0.split(separator: " ").dropFirst().first { !$0.isEmpty }.map(String.init) }
        #expect(modules.count > 20, "the parse found too few modules: \(modules)")
        let tested = Set(targets.filter { $0.key.hasSuffix("Tests") }.flatMap(\.value))
        let executables: Set<String> = ["rollout", "rollout-bench"]
        let untested = modules.filter { !tested.contains($0) && !executables.contains($0) }
        #expect(untested.isEmpty, "modules without a test target depending on them: \(untested)")
    }

    /// Every module of Sources/ is documented in the map's module list.
    @Test func everyModuleHasAParagraph() throws {
        let manifest = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let modules = Self.graph(AdapterIsolationTests.targetDependencies(manifest)).split(separator: "\n")
            .compactMap { $0.split(separator: " ").dropFirst().first { !$0.isEmpty }.map(String.init) }
        let doc = try String(
            contentsOf: TestSupport.packageRoot.appendingPathComponent("docs/ARCHITECTURE.md"), encoding: .utf8)
        for m in modules {
            #expect(doc.contains("- **\(m)**"), "docs/ARCHITECTURE.md does not describe \(m)")
        }
    }
}
