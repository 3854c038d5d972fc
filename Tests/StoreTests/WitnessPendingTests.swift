import Foundation
import TestSupport
import Testing

@testable import SQLiteStore

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
        guard case .lines(let current, let previous, let pending) = w.read() else {
            Issue.record("unreadable witness")
            return
        }
        #expect(pending.isEmpty)
        #expect(current == Witness.line(s) && previous == Witness.line(Self.state(19, "h19")))
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

    // MARK: The file's two slots

    @Test("a write overwrites the older slot in place: the file stays two slots long, generations alternate")
    func writesAlternateSlots() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        var s = Self.state(1, "a")
        try w.write(s)
        #expect(w.readWithLayout().layout == .slots(newest: 0, generation: 1))
        let inode = try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? UInt64
        for n in 2...6 {
            let t = Self.state(Int64(n), "h\(n)")
            try w.write(t, before: s)
            #expect(w.readWithLayout().layout == .slots(newest: (n - 1) % 2, generation: Int64(n)))
            #expect(w.read() == .lines(current: Witness.line(t), previous: Witness.line(s), pending: []))
            s = t
        }
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 2 * Witness.slotSize)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? UInt64 == inode, "rewritten, not overwritten")
    }

    @Test("a torn or spoiled newest slot reads as the witness before that write; both spoiled is unreadable")
    func tornSlotFallsBack() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        let a = Self.state(1, "a")
        let b = Self.state(2, "b")
        let c = Self.state(3, "c")
        try w.write(a)
        try w.write(b, before: a)
        let beforeWrite = try Data(contentsOf: URL(fileURLWithPath: path))
        try w.write(c, before: b)  // generation 3, in slot 0 over generation 1; slot 1 holds generation 2 (b)
        guard case .slots(let newest, _) = w.readWithLayout().layout else {
            Issue.record("not two slots")
            return
        }
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        let written = Witness.slot(generation: 3, body: "current \(Witness.line(c))\nprevious \(Witness.line(b))\n")
        // Where the slot's padding starts: the new lines and check end there.
        let length = written.count - written.reversed().prefix { $0 == UInt8(ascii: "\n") }.count
        // A crash part-way through the newest slot: the new bytes up to the cut, the slot's old bytes after it.
        for cut in [0, 1, 40, 100, 200, length - 1, length, 2048, Witness.slotSize - 1] {
            var torn = original
            let base = newest * Witness.slotSize
            torn.replaceSubrange((base + cut)..<(base + Witness.slotSize), with: beforeWrite[(base + cut)..<(base + Witness.slotSize)])
            try torn.write(to: URL(fileURLWithPath: path))
            if cut < length {
                #expect(w.read() == .lines(current: Witness.line(b), previous: Witness.line(a), pending: []), "cut at \(cut)")
                #expect(w.readWithLayout().layout == .slots(newest: 1 - newest, generation: 2))
            } else {
                #expect(w.read() == .lines(current: Witness.line(c), previous: Witness.line(b), pending: []), "cut at \(cut)")
            }
        }
        try original.write(to: URL(fileURLWithPath: path))
        // One flipped byte in the newest slot's lines: its check fails.
        var flipped = original
        flipped[newest * Witness.slotSize + 60] ^= 1
        try flipped.write(to: URL(fileURLWithPath: path))
        #expect(w.read() == .lines(current: Witness.line(b), previous: Witness.line(a), pending: []))
        // The next write after a torn slot writes over the torn one, and reads back whole.
        try w.write(c, before: b)
        #expect(w.read() == .lines(current: Witness.line(c), previous: Witness.line(b), pending: []))
        // Both slots spoiled: unreadable, never a guess.
        var both = original
        both[60] ^= 1
        both[Witness.slotSize + 60] ^= 1
        try both.write(to: URL(fileURLWithPath: path))
        guard case .unreadable = w.read() else {
            Issue.record("a witness with no intact slot was read")
            return
        }
    }

    @Test("the v1 text of earlier versions is read, and the first write replaces it with two slots")
    func versionOneIsReadAndReplaced() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        let a = Self.state(7, "a")
        let b = Self.state(8, "b")
        try "rollout-witness-v1\ncurrent \(Witness.line(a))\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(w.read() == .lines(current: Witness.line(a), previous: nil, pending: []))
        #expect(w.readWithLayout().layout == .other)
        try w.write(b, before: a)
        #expect(w.read() == .lines(current: Witness.line(b), previous: Witness.line(a), pending: []))
        #expect(w.readWithLayout().layout == .slots(newest: 0, generation: 1))
        // A cut v2 file (half a slot) is not overwritten in place: the next write makes the file whole again.
        let whole = try Data(contentsOf: URL(fileURLWithPath: path))
        try whole.prefix(Witness.slotSize + 10).write(to: URL(fileURLWithPath: path))
        #expect(w.readWithLayout().layout == .other)
        try w.write(Self.state(9, "c"), before: b)
        #expect(w.readWithLayout().layout == .slots(newest: 0, generation: 1))
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 2 * Witness.slotSize)
    }

    @Test("any damage to the file reads as one of the witness's states or as unreadable, never a crash or a third state")
    func damagedFilesNeverCrash() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        let a = Self.state(1, "a")
        let b = Self.state(2, "b")
        try w.write(a)
        try w.write(b, before: a)
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let known: [Witness.Content] = [
            .lines(current: Witness.line(a), previous: nil, pending: []),
            .lines(current: Witness.line(b), previous: Witness.line(a), pending: []),
        ]
        var rng = SystemRandomNumberGenerator()
        for round in 0..<400 {
            var bytes = original
            switch round % 4 {
            case 0: bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &rng)))
            case 1:
                for _ in 0..<Int.random(in: 1...8, using: &rng) { bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng) }
            case 2:
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                bytes.replaceSubrange(at..<min(bytes.count, at + 300), with: [UInt8](repeating: 0, count: min(bytes.count, at + 300) - at))
            default: bytes += [UInt8]((0..<Int.random(in: 1...5000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
            }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let content = w.read()
            if case .unreadable = content { continue }
            #expect(known.contains(content), "round \(round): \(content)")
        }
    }

    @Test("a slot written by hand with the largest generation is read, and the next write makes a new file, no overflow")
    func largestGenerationIsRewrittenWhole() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.witness").path
        let w = Witness(path: path)
        let a = Self.state(1, "a")
        let b = Self.state(2, "b")
        let slot = Witness.slot(generation: Int64.max, body: "current \(Witness.line(a))\n")
        try Data(slot + [UInt8](repeating: UInt8(ascii: "\n"), count: Witness.slotSize)).write(to: URL(fileURLWithPath: path))
        #expect(w.read() == .lines(current: Witness.line(a), previous: nil, pending: []))
        #expect(w.readWithLayout().layout == .other)
        try w.write(b, before: a)
        #expect(w.read() == .lines(current: Witness.line(b), previous: Witness.line(a), pending: []))
        #expect(w.readWithLayout().layout == .slots(newest: 0, generation: 1))
    }
}
