import Foundation
import Platform
import StoreSupport
import Testing

/// `GroupCommit`: writes that arrive while a group commits form the next group; each caller gets its own
/// operation's outcome, and only after the group holding it committed; a group that fails to commit fails every
/// caller in it and no other. (Serialized: the anticipation tests mark requests in `CommitAnticipation`, which is
/// one count for the whole process.)
@Suite(.serialized) struct GroupCommitTests {
    /// A commit that holds the first group until `release`, and fails the groups listed in `failing`.
    final class Gate: @unchecked Sendable {
        let condition = NSCondition()
        var released = false
        var groups: [[Int]] = []
        var committed: Set<Int> = []
        let failing: Set<Int>
        init(failing: Set<Int>) { self.failing = failing }

        func commit(_ ops: [Int]) throws -> [Result<Int, any Error>] {
            condition.lock()
            groups.append(ops)
            let index = groups.count - 1
            condition.broadcast()
            if index == 0 {
                let deadline = Date().addingTimeInterval(30)
                while !released && condition.wait(until: deadline) {}
            }
            let fails = failing.contains(index)
            if !fails { committed.formUnion(ops) }
            condition.unlock()
            if fails { throw CocoaError(.fileWriteUnknown) }
            return ops.map { .success($0 * 10) }
        }
    }

    final class Outcomes: @unchecked Sendable {
        let lock = NSLock()
        var values: [Int: Int] = [:]
        var failures: Set<Int> = []
        /// For each answered success: whether its operation had committed when the caller got the answer.
        var answeredBeforeCommit: [Int] = []
    }

    /// Polls `condition` (bounded by 30 s) with short waits.
    static func waitUntil(_ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while !condition() {
            guard Date() < deadline else { throw CocoaError(.userCancelled) }
            usleep(1_000)
        }
    }

    @Test func writesQueuedDuringACommitShareTheNextGroupAndEachCallerGetsItsOwnOutcome() throws {
        let gate = Gate(failing: [])
        let group = GroupCommit<Int, Int> { try gate.commit($0) }
        let outcomes = Outcomes()
        let done = DispatchGroup()
        func call(_ op: Int) {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                do {
                    let v = try group.run(op)
                    let committed = gate.condition.withLock { gate.committed.contains(op) }
                    outcomes.lock.withLock {
                        outcomes.values[op] = v
                        if !committed { outcomes.answeredBeforeCommit.append(op) }
                    }
                } catch {
                    outcomes.lock.withLock { _ = outcomes.failures.insert(op) }
                }
            }
        }
        // The first write commits alone and is held; 20 more queue behind it meanwhile.
        call(0)
        gate.condition.lock()
        let first = Date().addingTimeInterval(30)
        while gate.groups.isEmpty && gate.condition.wait(until: first) {}
        gate.condition.unlock()
        for op in 1...20 { call(op) }
        // Until (bounded) the 20 are queued behind the held group; nothing is answered meanwhile.
        try Self.waitUntil { group.queued == 20 }
        #expect(outcomes.lock.withLock { outcomes.values.isEmpty && outcomes.failures.isEmpty })
        gate.condition.withLock {
            gate.released = true
            gate.condition.broadcast()
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(outcomes.failures.isEmpty)
        #expect(outcomes.values == Dictionary(uniqueKeysWithValues: (0...20).map { ($0, $0 * 10) }))
        #expect(outcomes.answeredBeforeCommit.isEmpty)
        let groups = gate.condition.withLock { gate.groups }
        #expect(groups[0] == [0])
        #expect(groups.flatMap { $0 }.sorted() == Array(0...20))
        // The 20 that queued behind the held first write were committed together, in one group.
        #expect(groups.count == 2 && groups[1].sorted() == Array(1...20))
        #expect(group.statistics.groups == 2 && group.statistics.operations == 21)
    }

    @Test func aGroupThatFailsToCommitFailsEveryCallerInItAndNoOther() throws {
        let gate = Gate(failing: [1])
        let group = GroupCommit<Int, Int> { try gate.commit($0) }
        let outcomes = Outcomes()
        let done = DispatchGroup()
        for op in 0..<12 {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                do {
                    let v = try group.run(op)
                    outcomes.lock.withLock { outcomes.values[op] = v }
                } catch {
                    outcomes.lock.withLock { _ = outcomes.failures.insert(op) }
                }
            }
            if op == 0 {
                gate.condition.lock()
                let deadline = Date().addingTimeInterval(30)
                while gate.groups.isEmpty && gate.condition.wait(until: deadline) {}
                gate.condition.unlock()
            }
        }
        try Self.waitUntil { group.queued == 11 }
        gate.condition.withLock {
            gate.released = true
            gate.condition.broadcast()
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        let groups = gate.condition.withLock { gate.groups }
        // The held first write alone, then the 11 queued behind it in one failing group.
        #expect(groups.count == 2 && groups[1].count == 11)
        // Exactly the second group's callers failed; everyone else got their own value.
        #expect(outcomes.failures == Set(groups[1]))
        for (op, v) in outcomes.values { #expect(v == op * 10) }
        #expect(outcomes.values.count + outcomes.failures.count == 12)
    }

    /// A caller marked as on its way to a write (`CommitAnticipation.expecting`) is held while an unmarked caller
    /// writes `leaderOp` and so leads (anticipation bounded far beyond the test); once the leader is queued and has
    /// committed nothing, the marked caller is released and writes 1 (or, with `markedWrites` false, ends without
    /// writing). Returns the groups committed and the leader's answer.
    static func leaderBehindAMarkedCaller(markedWrites: Bool, leaderOp: Int) throws -> (groups: [[Int]], answer: Int?) {
        let gate = Gate(failing: [])
        gate.released = true
        let group = GroupCommit<Int, Int>(anticipation: 60) { try gate.commit($0) }
        final class State: @unchecked Sendable {
            let release = NSCondition()
            var go = false
            var answer: Int?
        }
        let state = State()
        let marked = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            CommitAnticipation.expecting {
                marked.signal()
                state.release.lock()
                let deadline = Date().addingTimeInterval(30)
                while !state.go && state.release.wait(until: deadline) {}
                state.release.unlock()
                if markedWrites { _ = try? group.run(1) }
            }
        }
        #expect(marked.wait(timeout: .now() + 30) == .success)
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            let answer = try? group.run(leaderOp)
            state.release.withLock { state.answer = answer }
        }
        try Self.waitUntil { group.queued == 1 }
        // The leader waits while the marked caller is on its way: nothing committed yet.
        #expect(gate.condition.withLock { gate.groups.isEmpty })
        state.release.withLock {
            state.go = true
            state.release.broadcast()
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        return (gate.condition.withLock { gate.groups.map { $0.sorted() } }, state.release.withLock { state.answer })
    }

    @Test func aLeaderWaitsForARequestOnItsWayToAWriteAndCommitsItInTheSameGroup() throws {
        let (groups, answer) = try Self.leaderBehindAMarkedCaller(markedWrites: true, leaderOp: 0)
        // One group: the leader's write and the one it waited for.
        #expect(groups == [[0, 1]])
        #expect(answer == 0)
    }

    /// A request marked once the leader is waiting does not hold it: the leader waits for the request that was on
    /// its way when it began (which queues), and commits with it while the later one is still on its way.
    @Test func aRequestMarkedWhileTheLeaderWaitsDoesNotHoldIt() throws {
        let gate = Gate(failing: [])
        gate.released = true
        let group = GroupCommit<Int, Int>(anticipation: 60) { try gate.commit($0) }
        final class Hold: @unchecked Sendable {
            let condition = NSCondition()
            var go: Set<Int> = []
            func wait(_ op: Int) {
                condition.lock()
                let deadline = Date().addingTimeInterval(60)
                while !go.contains(op) && condition.wait(until: deadline) {}
                condition.unlock()
            }
            func release(_ op: Int) {
                condition.withLock {
                    go.insert(op)
                    condition.broadcast()
                }
            }
        }
        let hold = Hold()
        let done = DispatchGroup()
        func markedCaller(_ op: Int) throws {
            let marked = DispatchSemaphore(value: 0)
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                CommitAnticipation.expecting {
                    marked.signal()
                    hold.wait(op)
                    _ = try? group.run(op)
                }
            }
            #expect(marked.wait(timeout: .now() + 30) == .success)
        }
        try markedCaller(1)
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            _ = try? group.run(0)
        }
        // The leader (0) waits for 1, which was on its way when it began; 2 starts only then.
        try Self.waitUntil { CommitAnticipation.leadersWaiting == 1 }
        try markedCaller(2)
        hold.release(1)
        // Before: the leader waited while any request was marked, so 2 held it (here for its 60 s bound).
        try Self.waitUntil { gate.condition.withLock { !gate.groups.isEmpty } }
        #expect(gate.condition.withLock { gate.groups.first?.sorted() } == [0, 1])
        hold.release(2)
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(gate.condition.withLock { gate.groups.map { $0.sorted() } } == [[0, 1], [2]])
    }

    @Test func aMarkedRequestThatEndsWithoutWritingReleasesTheLeader() throws {
        let (groups, answer) = try Self.leaderBehindAMarkedCaller(markedWrites: false, leaderOp: 2)
        // The leader committed alone once the marked request ended, without its 60 s bound running out.
        #expect(groups == [[2]])
        #expect(answer == 20)
    }
}
