import Foundation
import TestSupport
import Testing

@testable import Store

/// A write killed inside SQLite's commit can reappear when the WAL is recovered, after a later write (also killed)
/// rewrote the witness: the witness keeps such states pending, so that the store is not taken for a replaced one.
@Suite struct WitnessPendingTests {
    static func state(_ sequence: Int64, _ hash: String) -> StoreSeal.State {
        StoreSeal.State(tables: [:], sequence: sequence, hash: hash)
    }

    static func allows(_ w: Witness, _ s: StoreSeal.State) -> Bool {
        guard case .lines(let current, let previous, let pending) = w.read() else { return false }
        return Witness.allows(Witness.line(s), current: current, previous: previous, pending: pending)
    }

    @Test("a killed commit that reappears after the next write was killed too is allowed, until the store moves on")
    func orphanedCommitReappears() throws {
        let directory = try TemporaryDirectory()
        let w = Witness(path: directory.url.appendingPathComponent("store.witness").path)
        let s0 = Self.state(590, "s0")
        let x = Self.state(591, "x")
        let y = Self.state(591, "y")
        let z = Self.state(592, "z")
        let next = Self.state(593, "n")
        try w.write(s0)
        // A began at s0 and was killed inside its commit: the running processes still see s0.
        try w.write(x, before: s0)
        #expect(Self.allows(w, s0) && Self.allows(w, x))
        // B began at s0 and was killed after writing the witness, before its own commit.
        try w.write(y, before: s0)
        #expect(Self.allows(w, s0) && Self.allows(w, y))
        #expect(Self.allows(w, x), "A's commit, recovered from the WAL, reads as a replaced store")
        #expect(!Self.allows(w, Self.state(591, "other")) && !Self.allows(w, Self.state(589, "older")))
        // The store recovered x; C began there and committed z; D begins at z: nothing before z is allowed.
        try w.write(z, before: x)
        #expect(Self.allows(w, z) && Self.allows(w, x))
        try w.write(next, before: z)
        #expect(Self.allows(w, next) && Self.allows(w, z))
        #expect(!Self.allows(w, x) && !Self.allows(w, y) && !Self.allows(w, s0))
    }

    @Test("writes from the state the witness names keep nothing pending, and a write that changes nothing is not rewritten")
    func committedWritesKeepNothingPending() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        var s = Self.state(1, "a")
        try w.write(s)
        for n in 2...20 {
            let t = Self.state(Int64(n), "h\(n)")
            try w.write(t, before: s)
            s = t
        }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(!text.contains("pending"))
        #expect(text.split(separator: "\n").count == 3)
        let before = try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date
        usleep(20_000)
        try w.write(s, before: s)
        let after = try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date
        #expect(before == after)
    }

    @Test("pending lines are bounded")
    func pendingIsBounded() throws {
        let directory = try TemporaryDirectory()
        let w = Witness(path: directory.url.appendingPathComponent("store.witness").path)
        let s0 = Self.state(10, "s0")
        try w.write(s0)
        for n in 0..<30 { try w.write(Self.state(11, "killed\(n)"), before: s0) }
        guard case .lines(_, let previous, let pending) = w.read() else {
            Issue.record("unreadable witness")
            return
        }
        #expect(previous == Witness.line(s0))
        #expect(pending.count == Witness.maximumPending)
        #expect(pending.last == Witness.line(Self.state(11, "killed28")))
    }
}
