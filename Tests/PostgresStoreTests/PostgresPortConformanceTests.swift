import Foundation
@testable import PostgresStore
import StoreConformance
import Testing
import TestSupport

/// The shared conformance suites of the core's ports (Tests/StoreConformance), run against PostgreSQL: every
/// check gets a fresh database on the real server; `open` is another connection, as another process would have.
struct PostgresPortConformanceTests {
    @Test(arguments: TelemetryCountersConformance.checks.map(\.name))
    func telemetryCounters(_ check: String) throws {
        let factory: TelemetryCountersConformance.Factory = {
            let (_, conninfo) = try PostgresStoreTests.freshStore()
            return TelemetryCountersConformance.Fixture(
                open: { PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo)) },
                openReadOnly: { PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo, readOnly: true)) })
        }
        try TelemetryCountersConformance.checks.first { $0.name == check }!.run(factory)
    }

    @Test(arguments: SettingsConformance.checks.map(\.name))
    func settings(_ check: String) throws {
        let factory: SettingsConformance.Factory = {
            let (store, conninfo) = try PostgresStoreTests.freshStore()
            return SettingsConformance.Fixture(
                guardrails: PostgresGuardrailSettings(store: store), policy: PostgresStepUpStore(store: store, key: nil), config: store,
                openReadOnly: {
                    let reader = try PostgresConfigStore(conninfo: conninfo, readOnly: true)
                    return (PostgresGuardrailSettings(store: reader), PostgresStepUpStore(store: reader, key: nil))
                })
        }
        try SettingsConformance.checks.first { $0.name == check }!.run(factory)
    }
}
