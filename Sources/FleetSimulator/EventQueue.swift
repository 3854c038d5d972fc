/// The simulation's agenda: pending actions ordered by (time, sequence number).
///
/// The sequence number is given out in insertion order, so actions due at the same microsecond run in the order
/// they were scheduled, and a run is the same every time. A binary heap of plain 24-byte entries: a million
/// devices cost 24 MB and no reference counting.
struct EventQueue {
    struct Entry {
        /// Microseconds since the epoch.
        var time: Int64
        var sequence: UInt64
        /// What to do, packed by the simulation (device, action, session tag).
        var payload: UInt64

        @inline(__always)
        static func before(_ a: Entry, _ b: Entry) -> Bool {
            a.time < b.time || (a.time == b.time && a.sequence < b.sequence)
        }
    }

    private var heap: [Entry] = []
    private var nextSequence: UInt64 = 0

    var count: Int { heap.count }
    var isEmpty: Bool { heap.isEmpty }
    /// The time of the next entry.
    var nextTime: Int64? { heap.first?.time }

    mutating func reserve(_ n: Int) { heap.reserveCapacity(n) }

    mutating func push(time: Int64, payload: UInt64) {
        heap.append(Entry(time: time, sequence: nextSequence, payload: payload))
        nextSequence += 1
        var i = heap.count - 1
        let e = heap[i]
        while i > 0 {
            let parent = (i - 1) / 2
            guard Entry.before(e, heap[parent]) else { break }
            heap[i] = heap[parent]
            i = parent
        }
        heap[i] = e
    }

    mutating func pop() -> Entry? {
        guard let top = heap.first else { return nil }
        let last = heap.removeLast()
        guard !heap.isEmpty else { return top }
        var i = 0
        let n = heap.count
        while true {
            let l = 2 * i + 1
            if l >= n { break }
            var c = l
            if l + 1 < n, Entry.before(heap[l + 1], heap[l]) { c = l + 1 }
            guard Entry.before(heap[c], last) else { break }
            heap[i] = heap[c]
            i = c
        }
        heap[i] = last
        return top
    }
}
