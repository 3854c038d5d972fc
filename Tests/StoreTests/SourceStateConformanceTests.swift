import Foundation
import SQLiteStore
import StoreConformance
import Telemetry
import TelemetrySources
import Testing
import TestSupport

/// The store file passes the conformance suite of telemetry sources' state (`SourceStateConformance`), the same
/// checks the PostgreSQL team store runs (`PostgresSourceStateTests`); every check ends with the store verifying.
struct SourceStateConformanceTests {
    @Test(arguments: SourceStateConformance.checks.map(\.name))
    func sqliteSourceStatePasses(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance-sources")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var stores: [RolloutStore] = []
        let factory: SourceStateConformance.Factory = {
            count += 1
            let store = try TelemetryAndSettingsConformanceTests.freshStore(directory, "s\(count)")
            stores.append(store)
            let path = store.path
            return SourceStateConformance.Fixture(
                open: {
                    let store = try RolloutStore(path: path, create: false)
                    return (store, try store.telemetryCounters())
                },
                openReadOnly: { try RolloutStore(path: path, create: false, access: .readOnly) })
        }
        try SourceStateConformance.checks.first { $0.name == check }!.run(factory)
        // The pulls wrote through the store's gate: the whole store still verifies.
        for store in stores { _ = try store.verify() }
    }
}
