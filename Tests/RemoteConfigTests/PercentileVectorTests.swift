import Foundation
import RemoteConfig
import Testing
import TestSupport

/// The 10,000 ids of ../shared/vectors/remote-config, produced by firebase-admin 7.7.0's own evaluator.
struct PercentileVectorTests {
    struct Row {
        var id: String
        var enabled: Bool
        var microPercentile: Int64
    }

    static func rows() throws -> [Row] {
        let text = try String(contentsOf: TestSupport.vector("remote-config/rollout-2026-10pct.tsv"), encoding: .utf8)
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { line in
            let f = line.split(separator: "\t")
            return Row(id: String(f[0]), enabled: f[1] == "true", microPercentile: Int64(f[2])!)
        }
    }

    @Test func everyMicroPercentileMatchesFirebaseAdmin() throws {
        let rows = try Self.rows()
        #expect(rows.count == 10_000)
        let hasher = PercentileHasher(seed: "rollout-2026")
        var mismatches: [String] = []
        for row in rows where hasher.microPercentile(of: row.id) != row.microPercentile {
            mismatches.append(row.id)
        }
        #expect(mismatches.isEmpty, "mismatched ids: \(mismatches.prefix(10))")
        #expect(rows.filter(\.enabled).count == 970)
    }
}
