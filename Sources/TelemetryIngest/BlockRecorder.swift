#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Rollout
import Telemetry

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
/// reason catalogue through `reasonID`/`failureDetail`, and the table's fixed hash key);
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
