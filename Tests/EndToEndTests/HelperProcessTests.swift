import Foundation
import Testing
import TestSupport

/// The test suite's own helper processes end when a test is done with them, whatever they inherited: a child
/// that ignores or blocks SIGTERM (children of a worker thread inherit its blocked signals) is killed after the
/// grace period instead of leaving the test waiting forever.
@Suite("helper processes")
struct HelperProcessTests {
    @Test func aChildThatIgnoresSIGTERMIsKilledAfterTheGracePeriod() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        // A busy loop, not `sleep`: a grandchild would hold the test's descriptors after the kill. It says when its
        // trap is set, so the signal cannot come first and end it by SIGTERM.
        p.arguments = ["-c", "trap '' TERM; echo trapped; exec >&-; while :; do :; done"]
        let out = Pipe()
        TestSupport.keepPrivate(out.fileHandleForReading)
        TestSupport.keepPrivate(out.fileHandleForWriting)
        p.standardOutput = out
        try p.run()
        try out.fileHandleForWriting.close()
        // Read to the end: the child closes its output once the trap is set (bounded by the suite's time limit).
        let said = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(said == "trapped\n")
        TestSupport.stop(p, grace: 0.5)
        #expect(!p.isRunning)
        #expect(p.terminationReason == .uncaughtSignal)
        #expect(p.terminationStatus == SIGKILL)
    }

    @Test func aChildThatHonoursSIGTERMStopsWithIt() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sleep")
        p.arguments = ["30"]
        try p.run()
        // Spawned from a worker thread, the child may have SIGTERM blocked: it ends by SIGTERM, or by SIGKILL
        // after the grace.
        TestSupport.stop(p, grace: 2)
        #expect(!p.isRunning)
        #expect(p.terminationReason == .uncaughtSignal)
        #expect([SIGTERM, SIGKILL].contains(p.terminationStatus))
    }

    @Test func pipesMarkedPrivateAreNotInheritedByOtherChildren() throws {
        let kept = Pipe()
        TestSupport.keepPrivate(kept.fileHandleForWriting)
        let plain = Pipe()  // the control: what every pipe was before
        defer {
            try? kept.fileHandleForWriting.close()
            try? plain.fileHandleForWriting.close()
        }
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let report = dir.appendingPathComponent("fds").path
        // system(3), as the PostgreSQL server is started: it inherits every descriptor not marked close-on-exec.
        // The probe is a program the shell executes (not its `[` builtin): the shell's own descriptors, such as
        // the copy of standard output it saves around a redirection, may take a free number, and a program run
        // from it sees exactly what a server would inherit. Each descriptor is identified by its pipe's inode.
        func link(_ fd: Int32) -> String {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? "none"
        }
        let keptFD = kept.fileHandleForWriting.fileDescriptor
        let plainFD = plain.fileHandleForWriting.fileDescriptor
        let probe = { (fd: Int32) in "readlink /proc/self/fd/\(fd) || echo none" }
        let command = "{ \(probe(keptFD)); \(probe(plainFD)); } > '\(report)' 2>/dev/null"
        #expect(system(command) == 0)
        let seen = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(seen.count == 2, "the probe printed \(seen)")
        #expect(seen.first != link(keptFD), "the private pipe \(link(keptFD)) reached the child")
        #expect(seen.last == link(plainFD), "the control pipe \(link(plainFD)) did not reach the child: \(seen)")
    }

    /// rollout's own long runs wait for their stop signals through dispatch sources, which a blocked mask does not
    /// silence: `watch` started from this (signal-blocking) worker thread still stops on SIGTERM, within the grace,
    /// once it is looking (its first look printed) and also when the signal comes before that, while it starts.
    @Test(arguments: [true, false])
    func rolloutStopsOnSIGTERMEvenWhenStartedWithItBlocked(afterFirstLook: Bool) throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("rollout.db").path
        let binary = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(binary, ["init", "--store", store, "--seed", "rollout-sim"]).status == 0)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["watch", "--store", store]
        let out = Pipe()
        TestSupport.keepPrivate(out.fileHandleForReading)
        TestSupport.keepPrivate(out.fileHandleForWriting)
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        try out.fileHandleForWriting.close()
        if afterFirstLook {
            // The first look is printed (and flushed) from inside the loop, after its signal sources exist.
            let firstLook = DispatchSemaphore(value: 0)
            let reader = out.fileHandleForReading
            DispatchQueue.global().async {
                var seen = Data()
                while !seen.contains(UInt8(ascii: "\n")) {
                    let chunk = reader.availableData
                    if chunk.isEmpty { break }
                    seen += chunk
                }
                firstLook.signal()
            }
            try #require(firstLook.wait(timeout: .now() + 60) == .success, "watch printed no look within 60 s")
            #expect(p.isRunning, "watch runs until it is stopped")
        }
        TestSupport.stop(p, grace: 10)
        #expect(!(p.terminationReason == .uncaughtSignal && p.terminationStatus == SIGKILL), "SIGTERM was not honoured")
    }
}
