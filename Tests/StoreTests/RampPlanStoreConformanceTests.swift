import Foundation
import Rollout
import SQLiteStore
import StoreConformance
import Testing
import TestSupport
import Timekeeping

/// The SQLite store passes the ramp plan port's conformance suite (the checks the PostgreSQL store runs too); every
/// check ends with the whole store still verifying (seal, witness, chain).
struct RampPlanStoreConformanceTests {
    @Test(arguments: RampPlanStoreConformance.checks.map(\.name))
    func sqliteRampPlansPass(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance-plans")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var paths: [String] = []
        let factory: RampPlanStoreConformance.Factory = {
            count += 1
            let store = try TelemetryAndSettingsConformanceTests.freshStore(directory, "p\(count)")
            let path = store.path
            paths.append(path)
            return RampPlanStoreConformance.Fixture(
                open: {
                    let handle = try RolloutStore(path: path, create: false)
                    return (SQLiteRampPlans(store: handle), try handle.configStore())
                },
                openReadOnly: { SQLiteRampPlans(store: try RolloutStore(path: path, create: false, access: .readOnly)) }
            )
        }
        try RampPlanStoreConformance.checks.first { $0.name == check }!.run(factory)
        for path in paths { _ = try RolloutStore(path: path, create: false).verify() }
    }
}
