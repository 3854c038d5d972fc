import Foundation
import TestSupport
import Testing

/// The program's modules import no Foundation: linked into `rollout`, FoundationEssentials (and the regex modules
/// it brings) added about 10,000 relocations that every start of every process applied. Only the benchmark
/// executable, which is not what a user runs, may still import it. Checked on every source, so an import cannot
/// creep back unnoticed; the compiler then refuses the Foundation types themselves.
@Suite struct FoundationFreeTests {
    static let foundationModules: Set<String> = ["Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationInternationalization"]
    static let allowed: Set<String> = ["rollout-bench"]

    @Test func noProgramModuleImportsFoundation() throws {
        let sources = TestSupport.packageRoot.appendingPathComponent("Sources")
        let modules = try FileManager.default.contentsOfDirectory(atPath: sources.path).filter { !Self.allowed.contains($0) }
        #expect(modules.count > 20, "the modules were not listed: \(modules)")
        var files = 0
        for module in modules {
            let directory = sources.appendingPathComponent(module)
            guard let listing = FileManager.default.enumerator(atPath: directory.path) else { continue }
            for case let file as String in listing where file.hasSuffix(".swift") {
                files += 1
                let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                for line in text.split(separator: "\n") {
                    guard let imported = AdapterIsolationTests.importedModule(String(line)) else { continue }
                    #expect(!Self.foundationModules.contains(imported), "Sources/\(module)/\(file) imports \(imported)")
                }
            }
        }
        #expect(files > 200, "only \(files) sources were read")
    }

    /// The reader above sees the forms an import of Foundation takes.
    @Test func theCheckSeesFoundationImports() {
        for line in ["import Foundation", "@preconcurrency import Foundation", "import struct FoundationEssentials.Date", "  import FoundationNetworking"] {
            #expect(AdapterIsolationTests.importedModule(line).map { Self.foundationModules.contains($0) } == true, "\(line)")
        }
    }
}
