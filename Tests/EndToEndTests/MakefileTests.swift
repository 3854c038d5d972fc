import Foundation
import Testing
import TestSupport

/// The Makefile's builds plan the same commands wherever they are started.
///
/// SwiftPM adds `-color-diagnostics` to every swiftc command when its output is a terminal; a changed command
/// line recompiles every module, so a `make demo` typed in a terminal after `make test` (run by a script, its
/// output a pipe) rebuilt the whole release binary (over a minute here) before its first screen. Every
/// `swift build` of the Makefile therefore writes through a pipe, and a failed build still fails the recipe.
struct MakefileTests {
    static func makefile() throws -> [String] {
        try String(contentsOf: TestSupport.packageRoot.appendingPathComponent("Makefile"), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    @Test func everySwiftBuildWritesThroughAPipeAndFailsTheRecipeWhenItFails() throws {
        let lines = try Self.makefile()
        let builds = lines.filter { $0.hasPrefix("\t") && $0.contains("$(SWIFT) build") }
        #expect(builds.count >= 4, "the Makefile's swift build recipes: \(builds)")
        for line in builds {
            #expect(line.hasSuffix(" $(NOTTY)"), "a swift build whose output may be a terminal: \(line)")
        }
        #expect(lines.contains("NOTTY := 2>&1 | cat"))
        #expect(lines.contains("SHELL := /bin/bash"))
        #expect(lines.contains(".SHELLFLAGS := -o pipefail -c"))
    }

    /// The pipe keeps a build's failure: a recipe whose command fails before `$(NOTTY)` fails `make`.
    @Test func aFailingCommandBeforeThePipeFailsMake() throws {
        let directory = try TestSupport.temporaryDirectory("makefile")
        defer { try? FileManager.default.removeItem(at: directory) }
        let lines = try Self.makefile()
        let header = lines.filter { $0.hasPrefix("SHELL :=") || $0.hasPrefix(".SHELLFLAGS :=") || $0.hasPrefix("NOTTY :=") }
        #expect(header.count == 3)
        let probe = header + ["probe:", "\tfalse $(NOTTY)", ""]
        try probe.joined(separator: "\n").write(
            to: directory.appendingPathComponent("Makefile"), atomically: true, encoding: .utf8)
        let make = try TestSupport.run("/usr/bin/make", ["-s", "-C", directory.path, "probe"])
        #expect(make.status != 0, "make with a failing command before the pipe: \(make.stdout)\(make.stderr)")
    }
}
