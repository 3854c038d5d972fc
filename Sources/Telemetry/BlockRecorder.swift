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
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Submitted blocks, oldest first, and blocks ready to be filled again.
    private var queued: [EventBlock] = []
    private var spare: [EventBlock] = []
    private var recording = false
    private var stopping = false
    private var thread: pthread_t?

    /// Starts the thread; `blocks` bounds what may wait (about 70 kB each).
    init(batch: TelemetryBatch, blocks: Int = 4) {
        self.batch = batch
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(changed, nil)
        spare = (0..<blocks).map { _ in EventBlock() }
        var t = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(
            &t, nil,
            { raw in
                #if canImport(Darwin)
                    let recorder = Unmanaged<BlockRecorder>.fromOpaque(raw).takeRetainedValue()
                #else
                    let recorder = Unmanaged<BlockRecorder>.fromOpaque(raw!).takeRetainedValue()
                #endif
                recorder.run()
                return nil
            }, context)
        if rc == 0 {
            thread = t
        } else {
            Unmanaged<BlockRecorder>.fromOpaque(context).release()  // no thread: blocks are recorded in `submit`
        }
    }

    deinit {
        pthread_cond_destroy(changed)
        pthread_mutex_destroy(mutex)
        changed.deallocate()
        mutex.deallocate()
    }

    /// An empty block to fill (waits while every block is queued or being recorded).
    func take() -> EventBlock {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while spare.isEmpty { pthread_cond_wait(changed, mutex) }
        return spare.removeLast()
    }

    /// Queues `block` to be recorded after every block submitted before it.
    func submit(_ block: EventBlock) {
        guard thread != nil else {
            batch.record(block.filled)
            block.removeAll()
            pthread_mutex_lock(mutex)
            spare.append(block)
            pthread_mutex_unlock(mutex)
            return
        }
        pthread_mutex_lock(mutex)
        queued.append(block)
        pthread_cond_broadcast(changed)
        pthread_mutex_unlock(mutex)
    }

    /// Returns once every submitted block is recorded: the whole batch is the caller's again.
    func drain() {
        pthread_mutex_lock(mutex)
        while !queued.isEmpty || recording { pthread_cond_wait(changed, mutex) }
        pthread_mutex_unlock(mutex)
    }

    /// Records what was submitted and ends the thread.
    func stop() {
        guard let t = thread else { return }
        pthread_mutex_lock(mutex)
        stopping = true
        pthread_cond_broadcast(changed)
        pthread_mutex_unlock(mutex)
        pthread_join(t, nil)
        thread = nil
    }

    private func run() {
        pthread_mutex_lock(mutex)
        while true {
            while queued.isEmpty && !stopping { pthread_cond_wait(changed, mutex) }
            if queued.isEmpty { break }  // stopping, and nothing left
            let block = queued.removeFirst()
            recording = true
            pthread_mutex_unlock(mutex)
            batch.record(block.filled)
            block.removeAll()
            pthread_mutex_lock(mutex)
            recording = false
            spare.append(block)
            pthread_cond_broadcast(changed)
        }
        pthread_mutex_unlock(mutex)
    }
}
