import Dispatch
import Glibc

/// SIGINT and SIGTERM as requests to stop a long run, handed to `handler` on a global queue until `cancel`.
///
/// Dispatch signal sources, not handlers: a mask that blocks the signals (inherited from whoever started the
/// process, such as a worker thread of a test runner or a supervisor) does not silence them. The sources need the
/// signals ignored, so that their default action does not end the process first; but ignoring a signal discards
/// it if it is pending, and a stop signal that came while the process started, blocked, is pending. Such a signal
/// is handed to `handler` at once instead of being lost.
public final class StopSignals: @unchecked Sendable {
    public static let watched: [Int32] = [SIGINT, SIGTERM]
    private var sources: [any DispatchSourceSignal] = []

    public init(_ handler: @escaping @Sendable (Int32) -> Void) {
        var pending = sigset_t()
        var early: Int32?
        if sigpending(&pending) == 0 {
            for sig in Self.watched where early == nil && sigismember(&pending, sig) == 1 { early = sig }
        }
        sources = Self.watched.map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { handler(sig) }
            source.resume()
            return source
        }
        if let early { handler(early) }
    }

    /// Stops watching: the signals' default actions apply again.
    public func cancel() {
        sources.forEach { $0.cancel() }
        sources = []
        for sig in Self.watched { signal(sig, SIG_DFL) }
    }
}
