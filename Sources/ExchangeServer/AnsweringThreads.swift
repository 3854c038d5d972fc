import Platform

/// The threads that answer the requests whose answer may wait (`HTTPHandler.answerWaits`), off libmicrohttpd's
/// event loops.
///
/// A libmicrohttpd worker thread runs the event loop of every connection it accepted; a handler that waits on
/// its thread (a group commit's sync, a PostgreSQL round trip) holds all of them. The kernel hands new
/// connections to whichever worker wakes first, so a few workers can own every busy connection: with 8 clients
/// consuming limited-use tokens, two of the 16 workers owned all 8 connections, each request waited behind the
/// others of its worker, and the group commits held about two writes each. Here each waiting request has a
/// thread of its own, so every request on its way to a write can join the next group.
///
/// Threads start when a job finds none idle, up to `limit` (the server's connection limit: a connection has at
/// most one request in flight), and an idle one ends after `idleSeconds`, or at once when the server stops.
final class AnsweringThreads: @unchecked Sendable {
    private let condition = Condition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var threads = 0
    private var idle = 0
    private var stopping = false
    private let limit: Int
    private let idleSeconds: Double

    init(limit: Int, idleSeconds: Double = 30) {
        self.limit = max(1, limit)
        self.idleSeconds = idleSeconds
    }

    /// Runs `job` on an idle thread, or a new one; at the limit it waits for the next thread to come free.
    func run(_ job: @escaping @Sendable () -> Void) {
        let start = condition.withLock { () -> Bool in
            jobs.append(job)
            if idle > jobs.count - head - 1 {
                condition.signal()
                return false
            }
            guard threads < limit else { return false }
            threads += 1
            return true
        }
        if start { detachThread { [self] in serve() } }
    }

    /// Threads running (tests).
    var running: Int { condition.withLock { threads } }

    /// Idle threads end now, busy ones after their job.
    func stop() {
        condition.withLock {
            stopping = true
            condition.broadcast()
        }
    }

    private func serve() {
        condition.lock()
        while true {
            if head < jobs.count {
                let job = jobs[head]
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                }
                condition.unlock()
                job()
                condition.lock()
                continue
            }
            if stopping { break }
            idle += 1
            let signalled = condition.wait(seconds: idleSeconds)
            idle -= 1
            if !signalled, head == jobs.count { break }
        }
        threads -= 1
        condition.unlock()
    }
}
