#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Parsed native events waiting to be recorded, with their installation ids copied into the block's own
/// bytes, so that the block outlives the input bytes it was parsed from.
final class EventBlock {
    static let capacity = 1024
    let events = UnsafeMutableBufferPointer<ParsedEvent>.allocate(capacity: EventBlock.capacity)
    private(set) var count = 0
    private var arena: UnsafeMutablePointer<UInt8>
    private var arenaCapacity = 64 << 10
    private var arenaCount = 0

    init() { arena = .allocate(capacity: arenaCapacity) }

    deinit {
        events.deallocate()
        arena.deallocate()
    }

    var isEmpty: Bool { count == 0 }

    /// Whether `e` with an id of `idLength` bytes still fits.
    func fits(idLength: Int) -> Bool { count < EventBlock.capacity && arenaCount + idLength <= arenaCapacity }

    /// Appends `e` with its id `id` (copied); `fits` must hold, unless the block is empty (it then grows).
    func append(_ e: ParsedEvent, id: UnsafeRawBufferPointer) {
        if arenaCount + id.count > arenaCapacity {
            precondition(count == 0, "EventBlock.append: a full block")
            arena.deallocate()
            arenaCapacity = id.count
            arena = .allocate(capacity: arenaCapacity)
        }
        var event = e
        if let base = id.baseAddress { (arena + arenaCount).update(from: base.assumingMemoryBound(to: UInt8.self), count: id.count) }
        event.id = UnsafePointer(arena + arenaCount)
        event.idLength = id.count
        arenaCount += id.count
        events[count] = event
        count += 1
    }

    /// The events appended so far.
    var filled: UnsafeMutableBufferPointer<ParsedEvent> { UnsafeMutableBufferPointer(rebasing: events[0..<count]) }

    func removeAll() {
        count = 0
        arenaCount = 0
    }
}

/// A mutex with one condition, for the hand-offs between an ingest's two threads.
final class Monitor: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
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
    func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Inside `locked`: waits until `ready` holds (woken by `broadcast`).
    func wait(until ready: () -> Bool) {
        while !ready() { pthread_cond_wait(changed, mutex) }
    }

    /// Inside `locked`: wakes every waiter.
    func broadcast() { pthread_cond_broadcast(changed) }
}

/// A thread running `body`, joined by `join()`; nil when the system has no thread to give.
final class WorkerThread: @unchecked Sendable {
    private var thread: pthread_t
    private var joined = false

    private init(_ thread: pthread_t) { self.thread = thread }

    static func start(_ body: @escaping @Sendable () -> Void) -> WorkerThread? {
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

    func join() {
        guard !joined else { return }
        joined = true
        pthread_join(thread, nil)
    }
}

/// A fixed set of reusable buffers passed from a producing thread to a consuming one, oldest first: the
/// producer fills a spare buffer and hands it over; the consumer takes the next one and gives it back empty.
/// At most as many buffers as were given are in flight, so the faster side waits for the slower one.
final class Handoff<Buffer: AnyObject>: @unchecked Sendable {
    private let monitor = Monitor()
    private var ready: [Buffer] = []
    private var spare: [Buffer]
    /// Buffers the consumer took and has not given back.
    private var consuming = 0
    /// The producer hands no more (`close`), or the consumer gave up (`cancel`).
    private var closed = false
    private var cancelled = false

    init(_ buffers: [Buffer]) { spare = buffers }

    /// Producer: an empty buffer (waits for one), nil once the consumer cancelled.
    func takeSpare() -> Buffer? {
        monitor.locked {
            monitor.wait { !spare.isEmpty || cancelled }
            return cancelled ? nil : spare.removeLast()
        }
    }

    /// Producer: passes a filled buffer on.
    func hand(_ buffer: Buffer) {
        monitor.locked {
            ready.append(buffer)
            monitor.broadcast()
        }
    }

    /// Producer: puts an unused buffer back, or (`consumed`) the consumer gives back one it took.
    func giveBack(_ buffer: Buffer, consumed: Bool = true) {
        monitor.locked {
            if consumed { consuming -= 1 }
            spare.append(buffer)
            monitor.broadcast()
        }
    }

    /// Producer: nothing more will be handed.
    func close() {
        monitor.locked {
            closed = true
            monitor.broadcast()
        }
    }

    /// Consumer: stops the producer (its next `takeSpare` returns nil).
    func cancel() {
        monitor.locked {
            cancelled = true
            monitor.broadcast()
        }
    }

    /// Consumer: the oldest filled buffer (waits for one), nil once the producer closed and all were taken.
    func next() -> Buffer? {
        monitor.locked {
            monitor.wait { !ready.isEmpty || closed }
            guard !ready.isEmpty else { return nil }
            consuming += 1
            return ready.removeFirst()
        }
    }

    /// Waits until every buffer handed so far was taken and given back.
    func waitUntilConsumed() {
        monitor.locked { monitor.wait { ready.isEmpty && consuming == 0 } }
    }
}

/// Records blocks of parsed native events into a batch on a thread of its own, in the order they were
/// submitted: reading and parsing the next lines then overlaps with updating the batch's tables, the two
/// halves of an ingest on two cores, and the batch ends exactly as if every block had been recorded in turn.
///
/// Ownership while the thread runs: the submitting thread may touch only what parsing uses (the batch's
/// `memberNames`, its reason catalogue through `reasonID`/`failureDetail`, and the table's fixed hash key);
/// every other part of the batch (counters, installations, spilled runs, event count and times) belongs to the
/// recording thread until `drain()` returns. `stop()` (or deinit) records what was submitted, then ends it.
final class BlockRecorder: @unchecked Sendable {
    private let batch: TelemetryBatch
    private let blocks: Handoff<EventBlock>
    private var thread: WorkerThread?

    /// Starts the thread; `blocks` bounds what may wait (about 70 kB each).
    init(batch: TelemetryBatch, blocks: Int = 4) {
        self.batch = batch
        self.blocks = Handoff((0..<blocks).map { _ in EventBlock() })
        thread = WorkerThread.start { [self] in run() }  // none: blocks are recorded in `submit`
    }

    /// An empty block to fill (waits while every block is queued or being recorded).
    func take() -> EventBlock { blocks.takeSpare()! }  // never cancelled

    /// Queues `block` to be recorded after every block submitted before it.
    func submit(_ block: EventBlock) {
        guard thread != nil else {
            batch.record(block.filled)
            block.removeAll()
            blocks.giveBack(block, consumed: false)
            return
        }
        blocks.hand(block)
    }

    /// Returns once every submitted block is recorded: the whole batch is the caller's again.
    func drain() { blocks.waitUntilConsumed() }

    /// Records what was submitted and ends the thread.
    func stop() {
        guard let thread else { return }
        blocks.close()
        thread.join()
        self.thread = nil
    }

    private func run() {
        while let block = blocks.next() {
            batch.record(block.filled)
            block.removeAll()
            blocks.giveBack(block)
        }
    }
}
