import FirebaseFake
import FirebaseRemoteConfig
import WebClient
import Foundation
import PostgresStore
import Rollout
import StoreConformance
import TestSupport
import Testing

/// The Firebase store passes the same conformance suite of the config port as the SQLite, in-memory and
/// PostgreSQL stores: each check on its own strict fake whose version 1 is the rollout's starting template, with
/// its state store a file or a fresh database on a real PostgreSQL server (`PostgresFirebaseState`).
@Suite(.serialized)
struct FirebaseConformanceTests {
    @Test(arguments: ConfigStoreConformance.checks.map(\.name), ["sqlite", "postgresql"])
    func firebaseConfigStorePasses(_ check: String, state: String) throws {
        var fakes: [FakeFirebase] = []
        var stores: [FirebaseConfigStore] = []
        let factory: ConfigStoreConformance.Factory = { seed in
            let fake = try FakeFirebase(template: try RolloutPlan.initialTemplate(seed: seed).json.prettyText)
            fakes.append(fake)
            let store =
                state == "sqlite"
                ? try fake.store()
                : try fake.store(
                    state: try PostgresFirebaseState.open(
                        conninfo: try PostgresServer.get().freshDatabase(), project: fake.project, create: true))
            stores.append(store)
            return store
        }
        try ConfigStoreConformance.checks.first { $0.name == check }!.run(factory)
        // Every publish the checks made has its audit record naming the Firebase version and ETag it produced.
        for (fake, store) in zip(fakes, stores) {
            let report = try store.verifyIntegrity()
            #expect(report.versions == (try fake.headNumber()) - 1, "one published record per version after 1")
        }
    }
}
