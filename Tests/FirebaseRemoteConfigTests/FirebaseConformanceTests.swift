import FirebaseFake
import FirebaseRemoteConfig
import Foundation
import Rollout
import StoreConformance
import Testing

/// The Firebase store passes the same conformance suite of the config port as the SQLite, in-memory and
/// PostgreSQL stores: each check on its own strict fake whose version 1 is the rollout's starting template.
@Suite(.serialized)
struct FirebaseConformanceTests {
    @Test(arguments: ConfigStoreConformance.checks.map(\.name))
    func firebaseConfigStorePasses(_ check: String) throws {
        var fakes: [FakeFirebase] = []
        var stores: [FirebaseConfigStore] = []
        let factory: ConfigStoreConformance.Factory = { seed in
            let fake = try FakeFirebase(template: try RolloutPlan.initialTemplate(seed: seed).json.prettyText)
            fakes.append(fake)
            let store = try fake.store()
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
