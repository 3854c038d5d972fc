import Foundation
import TestSupport

// `make bench`: every figure is printed beside the peer or limit it is compared with, measured in the same run.
// Usage: rollout-bench [SUITE...]   (no argument: all suites)
EndOnSignal.install()
let requested = Set(CommandLine.arguments.dropFirst())
var failures = 0
for suite in BenchSuites.all where requested.isEmpty || requested.contains(suite.name) {
    print("== \(suite.name): \(suite.title)")
    // The dirty pages of the suites before are written back first: a suite's fsyncs must not wait for another's.
    sync()
    do {
        try suite.run()
    } catch {
        failures += 1
        print("!! \(suite.name) failed: \(error)")
    }
    print("")
    fflush(nil)
}
EndOnSignal.exit(failures == 0 ? 0 : 1)

/// Ctrl-C (SIGINT) or SIGTERM ends the bench the way its own end does: the PostgreSQL servers it started are
/// stopped and their directories removed (`PostgresServer.stopAll`). Before, a killed bench left its server running
/// (started detached, it does not get the terminal's Ctrl-C). The handler only writes a byte to a pipe (what a
/// signal handler may do); a thread of its own reads it, stops the servers and ends the process, while the bench's
/// own end, should it come meanwhile, waits for that. A handler, unlike a blocked signal mask, is not inherited by
/// the processes the bench starts.
enum EndOnSignal {
    nonisolated(unsafe) static var writeEnd: Int32 = -1
    nonisolated(unsafe) static var received: Int32 = 0

    static func install() {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return }
        writeEnd = ends[1]
        let readEnd = ends[0]
        for s in [SIGINT, SIGTERM] {
            signal(s) { number in
                EndOnSignal.received = number
                var byte: UInt8 = 1
                _ = write(EndOnSignal.writeEnd, &byte, 1)
            }
        }
        Thread.detachNewThread {
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) < 0, errno == EINTR {}
            print("\n!! ended by signal \(received): stopping the PostgreSQL servers it started")
            fflush(nil)
            PostgresServer.stopAll()
            _exit(128 + received)
        }
    }

    /// The bench's own end: `exit(code)`, unless a signal is ending it (then the signal's thread ends it).
    static func exit(_ code: Int32) -> Never {
        while received != 0 { sleep(1) }
        Foundation.exit(code)
    }
}
