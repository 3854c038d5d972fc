#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A mutex with one condition, for the hand-offs between an ingest's two threads.
package final class Monitor: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(changed, nil)
    }

    deinit {
        pthread_cond_destroy(changed)
        pthread_mutex_destroy(mutex)
        changed.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` holding the mutex.
    package func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Inside `locked`: waits until `ready` holds (woken by `broadcast`).
    package func wait(until ready: () -> Bool) {
        while !ready() { pthread_cond_wait(changed, mutex) }
    }

    /// Inside `locked`: wakes every waiter.
    package func broadcast() { pthread_cond_broadcast(changed) }
}

/// A thread running `body`, joined by `join()`; nil when the system has no thread to give.
package final class WorkerThread: @unchecked Sendable {
    private var thread: pthread_t
    private var joined = false

    private init(_ thread: pthread_t) { self.thread = thread }

    package static func start(_ body: @escaping @Sendable () -> Void) -> WorkerThread? {
        final class Box: @unchecked Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        var t = pthread_t()
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        let rc = pthread_create(
            &t, nil,
            { raw in
                #if canImport(Darwin)
                    let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
                #else
                    let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
                #endif
                box.body()
                return nil
            }, context)
        guard rc == 0 else {
            Unmanaged<Box>.fromOpaque(context).release()
            return nil
        }
        return WorkerThread(t)
    }

    package func join() {
        guard !joined else { return }
        joined = true
        pthread_join(thread, nil)
    }

    /// Lets the thread end on its own, never joined (its resources are freed when it ends).
    package func detach() {
        guard !joined else { return }
        joined = true
        pthread_detach(thread)
    }
}

/// A fixed set of reusable buffers passed from a producing thread to a consuming one, oldest first: the
/// producer fills a spare buffer and hands it over; the consumer takes the next one and gives it back empty.
/// At most as many buffers as were given are in flight, so the faster side waits for the slower one.
package final class Handoff<Buffer: AnyObject>: @unchecked Sendable {
    private let monitor = Monitor()
    private var ready: [Buffer] = []
    private var spare: [Buffer]
    /// Buffers the consumer took and has not given back.
    private var consuming = 0
    /// The producer hands no more (`close`), or the consumer gave up (`cancel`).
    private var closed = false
    private var cancelled = false

    package init(_ buffers: [Buffer]) { spare = buffers }

    /// Producer: an empty buffer (waits for one), nil once the consumer cancelled.
    package func takeSpare() -> Buffer? {
        monitor.locked {
            monitor.wait { !spare.isEmpty || cancelled }
            return cancelled ? nil : spare.removeLast()
        }
    }

    /// Producer: passes a filled buffer on.
    package func hand(_ buffer: Buffer) {
        monitor.locked {
            ready.append(buffer)
            monitor.broadcast()
        }
    }

    /// Producer: puts an unused buffer back, or (`consumed`) the consumer gives back one it took.
    package func giveBack(_ buffer: Buffer, consumed: Bool = true) {
        monitor.locked {
            if consumed { consuming -= 1 }
            spare.append(buffer)
            monitor.broadcast()
        }
    }

    /// Producer: nothing more will be handed.
    package func close() {
        monitor.locked {
            closed = true
            monitor.broadcast()
        }
    }

    /// Consumer: stops the producer (its next `takeSpare` returns nil).
    package func cancel() {
        monitor.locked {
            cancelled = true
            monitor.broadcast()
        }
    }

    /// Consumer: the oldest filled buffer (waits for one), nil once the producer closed and all were taken.
    package func next() -> Buffer? {
        monitor.locked {
            monitor.wait { !ready.isEmpty || closed }
            guard !ready.isEmpty else { return nil }
            consuming += 1
            return ready.removeFirst()
        }
    }

    /// Waits until every buffer handed so far was taken and given back.
    package func waitUntilConsumed() {
        monitor.locked { monitor.wait { ready.isEmpty && consuming == 0 } }
    }
}
