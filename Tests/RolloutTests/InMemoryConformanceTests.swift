import Rollout
import RemoteConfig
import StoreConformance
import Testing
import Timekeeping

/// The in-memory store (the core's own test double) passes the same conformance suite as the SQLite store.
struct InMemoryConformanceTests {
    @Test func inMemoryConfigStorePasses() throws {
        try ConfigStoreConformance.all { seed in
            InMemoryConfigStore(initial: try RolloutPlan.initialTemplate(seed: seed), time: Instant(seconds: 1_780_000_000))
        }
    }
}
