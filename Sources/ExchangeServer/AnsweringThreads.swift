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
    /// Jobs running.
    private var busy = 0
    /// Callers in `waitUntilIdle`: only they are woken when the last job ends (a broadcast to every idle thread
    /// after each job woke all of them, each request at 1 client after a burst of 64 cost 64 wake-ups: 1.0 ms p50
    /// instead of 0.3).
    private var idleWaiters = 0
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
        guard start, !tryDetachThread({ [self] in serve() }) else { return }
        // No thread could be made (out of memory, or of threads): one that exists takes the job after its own;
        // with none, the caller answers it, as a worker answered every request before.
        let alone = condition.withLock { () -> Bool in
            threads -= 1
            return threads == 0
        }
        if alone { drain() }
    }

    /// Runs the queued jobs on the calling thread, until none is left.
    private func drain() {
        while let job = condition.withLock({ () -> (@Sendable () -> Void)? in
            guard head < jobs.count else { return nil }
            busy += 1
            return take()
        }) {
            job()
            condition.withLock { finished() }
        }
    }

    /// A job ended (the lock held): the last one running wakes a `waitUntilIdle`, and only that.
    private func finished() {
        busy -= 1
        if busy == 0, idleWaiters > 0 { condition.broadcast() }
    }

    /// The next job (the lock held; one is queued).
    private func take() -> @Sendable () -> Void {
        let job = jobs[head]
        head += 1
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        }
        return job
    }

    /// Threads running (tests).
    var running: Int { condition.withLock { threads } }

    /// Jobs not started are dropped (a stopping server has answered their connections), idle threads end now,
    /// busy ones after their job; a job run after this runs at once on a thread that then ends.
    func stop() {
        condition.withLock {
            stopping = true
            jobs.removeAll()
            head = 0
            condition.broadcast()
        }
    }

    /// Waits until no job runs, at most `seconds`; false if one still did.
    @discardableResult
    func waitUntilIdle(atMost seconds: Double) -> Bool {
        let deadline = Deadline(secondsFromNow: seconds)
        return condition.withLock {
            idleWaiters += 1
            defer { idleWaiters -= 1 }
            while busy > 0 { if !condition.wait(until: deadline) { return busy == 0 } }
            return true
        }
    }

    private func serve() {
        condition.lock()
        while true {
            if head < jobs.count {
                let job = take()
                busy += 1
                condition.unlock()
                job()
                condition.lock()
                finished()
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
