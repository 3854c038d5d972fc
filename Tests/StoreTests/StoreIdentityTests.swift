import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import Testing

/// A long-lived connection (the console's, a simulation's) keeps reading and writing the file it opened after the
/// path stops naming it. `identityProblem()` says so (the console checks it on every refresh), and a write is
/// refused with nothing written.
@Suite(.serialized)
struct StoreIdentityTests {
    @Test func aRemovedFileIsNamedAndRefusesWrites() throws {
        let f = try StoreFixture("identity")
        let (store, config) = try f.open()
        #expect(store.identityProblem() == nil)
        try FileManager.default.removeItem(atPath: f.path)
        #expect(store.identityProblem() == "no file at that path any more")
        #expect {
            try f.writePath(config).execute(StoreFixture.request(.set(MicroPercent(5_000_000))))
        } throws: { "\($0)".contains("removed or replaced") }
        #expect(!FileManager.default.fileExists(atPath: f.path))
    }

    @Test func anotherFileAtThePathIsNamed() throws {
        let f = try StoreFixture("identity")
        let (store, _) = try f.open()
        let other = try StoreFixture("identity-other")
        _ = try other.open()
        #expect(rename(other.path, f.path) == 0)
        #expect(store.identityProblem() == "another file is at that path now")
    }

    @Test func aFileTruncatedInPlaceIsNamed() throws {
        let f = try StoreFixture("identity")
        let (store, _) = try f.open()
        #expect(truncate(f.path, 0) == 0)
        #expect(store.identityProblem() == "the file was truncated to 0 bytes")
    }
}
