import ExchangeServer
import Testing

/// The rule by which `rollout serve` shuts connections down (`ConnectionWatch.late`), on made-up times with the
/// server's default deadlines. The timing through the real server is in `SlowClientTests`.
@Suite struct ConnectionWatchRuleTests {
    typealias Phase = ConnectionWatch.Phase
    static let deadlines = ConnectionWatch.Deadlines(
        head: 10, body: 30, underPressure: 2, headersUnderPressure: 0.5, pressureConnections: 4,
        minimumBodyRate: 1024)
    let now: UInt64 = 1_000_000_000

    /// `seconds` before `now`, in the watch's microseconds.
    func ago(_ seconds: Double) -> UInt64 { now - UInt64(seconds * 1e6) }

    /// The indices of the late connections; a body's rate measured since its head (`rateMark` at `since`).
    func late(_ connections: [(Phase, UInt64, Int, UInt64?)]) -> Set<Int> {
        late(connections.map { ($0.0, $0.1, $0.2, $0.3, ConnectionWatch.RateMark(at: $0.1, bytes: 0)) })
    }

    func late(_ connections: [(Phase, UInt64, Int, UInt64?, ConnectionWatch.RateMark)]) -> Set<Int> {
        Set(
            ConnectionWatch.late(
                connections.map { ($0.0, $0.1, $0.2, $0.3, $0.4) }, at: now, deadlines: Self.deadlines))
    }

    /// Reproduction (item 7): a head trickled one line at a time stayed open for ever, because the idle timeout
    /// counted from its last byte. The head deadline counts from the accept, whatever arrived since.
    @Test func aHeadIsLateTenSecondsAfterTheAcceptHoweverRecentItsLastLine() {
        #expect(late([(.head, ago(10.5), 0, ago(10.4))]) == [0])
        #expect(late([(.head, ago(9.5), 0, ago(9.4))]).isEmpty)
    }

    /// A body has 30 s after its head, even at a good rate; answering connections have no deadline here.
    @Test func aBodyIsLateThirtySecondsAfterItsHead() {
        #expect(
            late([(.body, ago(31), 10_000_000, nil), (.body, ago(29), 0, nil), (.answering, ago(60), 0, nil)]) == [0])
    }

    /// Below the pressure mark (4 open here) nothing shorter applies: three trickling heads a second after their
    /// request line stay.
    @Test func withoutPressureOnlyTheLongDeadlinesApply() {
        let trickling: (Phase, UInt64, Int, UInt64?) = (.head, ago(3), 0, ago(1))
        #expect(late([trickling, trickling, trickling]).isEmpty)
    }

    /// Under pressure (4 open): headers not complete 0.5 s after their request line, an idle connection after
    /// 2 s, and a body under 1 KiB/s after 2 s are shut down; an honest head just begun, a fast body and an
    /// answering connection are not.
    @Test func underPressureSlowHeadsIdleConnectionsAndSlowBodiesGoFirst() {
        let connections: [(Phase, UInt64, Int, UInt64?)] = [
            (.head, ago(0.7), 0, ago(0.6)),  // request line 0.6 s ago, headers incomplete: late
            (.head, ago(0.1), 0, ago(0.05)),  // honest head under way
            (.head, ago(2.5), 0, nil),  // idle keep-alive, or a trickled request line: late
            (.head, ago(1.5), 0, nil),  // idle, not yet 2 s
            (.body, ago(3), 1_000, nil),  // 333 B/s: late
            (.body, ago(3), 30_000, nil),  // 10 KB/s
            (.answering, ago(20), 0, nil),
        ]
        #expect(late(connections) == [0, 2, 4])
    }

    /// Reproduction: a body whose first 40 KB came at once and then one byte every 5 s averaged over 1 KiB/s
    /// since its head for some 39 s, so under pressure it held its slot until the 30 s body deadline. The rate is
    /// now the recent one (since the watch's last mark): a stalled body is slow whatever came before, and a body
    /// arriving steadily fast is not, however large.
    @Test func underPressureAStalledBodyIsSlowWhateverItSentFirst() {
        typealias Mark = ConnectionWatch.RateMark
        let connections: [(Phase, UInt64, Int, UInt64?, Mark)] = [
            (.body, ago(5), 40_001, nil, Mark(at: ago(3), bytes: 40_000)),  // 40 KB at once, then a byte: late
            (.body, ago(5), 8_000_000, nil, Mark(at: ago(3), bytes: 3_200_000)),  // 1.6 MB/s steadily
            (.body, ago(5), 12_000, nil, Mark(at: ago(3), bytes: 6_000)),  // 2 KB/s steadily
            (.body, ago(2.5), 40_000, nil, Mark(at: ago(2.5), bytes: 0)),  // its first period: the average
            (.head, ago(0.1), 0, ago(0.05), Mark(at: ago(0.1), bytes: 0)),
        ]
        #expect(late(connections) == [0])
    }
}
