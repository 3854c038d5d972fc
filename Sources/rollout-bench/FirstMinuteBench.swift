import Foundation

/// The first minute of a new user: `make demo` after `make test` (or `make bench`) on the same clone reuses the
/// release build and shows the console's first screen within 10 s; and `make test`'s own wall time, as its last
/// successful run recorded it (`make test` writes `.build/make-test-seconds`), against the 20-minute limit.
enum FirstMinuteBench {
    static let suites = [
        BenchSuite(name: "first-minute", title: "make demo after a build: seconds to the first screen; make test wall time", run: run)
    ]

    /// Runs `make demo` on a 120×40 pseudo-terminal from the clone's root and waits (up to 600 s) for the
    /// console's condition panel; prints the seconds and whether make compiled anything on the way.
    static let demoHost = """
        import json, os, pty, select, signal, struct, sys, time, fcntl, termios
        import pyte
        screen = pyte.Screen(120, 40)
        stream = pyte.ByteStream(screen)
        start = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.environ["TERM"] = "xterm-256color"
            # A user's shell, not make's: under `make bench ARGS=...`, make exports ARGS (and MAKEFLAGS carries it),
            # and the demo would be handed the bench's suites as its arguments.
            for name in ("ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
                os.environ.pop(name, None)
            os.execvp("make", ["make", "--no-print-directory", "demo"])
        seen, raw, first = False, b"", None
        end = start + 600
        while time.monotonic() < end:
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                raw += chunk
                stream.feed(chunk)
                if any("Condition" in line and "AppAttestEnabled" in line for line in screen.display):
                    first = time.monotonic() - start
                    break
        os.write(fd, b"q")
        code, deadline = None, time.monotonic() + 10
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
        if code is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        text = raw.decode("utf-8", "replace")
        # What the terminal showed last, plain: the reason when no console came.
        tail = "\\n".join(line.rstrip() for line in screen.display if line.strip())[-1500:] or text[-1500:]
        json.dump({"first": first, "compiled": text.count("Compiling"), "linked": text.count("Linking"), "exit": code,
                   "seconds": time.monotonic() - start, "tail": tail}, sys.stdout)
        """

    static func run() throws {
        guard FileManager.default.fileExists(atPath: "Makefile"), FileManager.default.fileExists(atPath: "Package.swift")
        else { throw BenchError("run from the clone's root (make bench does): no Makefile here") }
        let out = try runCapture(try peerPython(), ["-c", demoHost])
        guard let data = out.data(using: .utf8), let r = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { throw BenchError("the pty host printed '\(out)'") }
        guard let first = r["first"] as? Double else {
            let seconds = (r["seconds"] as? Double).map { String(format: "%.1f", $0) } ?? "?"
            throw BenchError(
                "make demo showed no console (exit \(r["exit"].map { "\($0)" } ?? "?") after \(seconds) s; limit 600 s); "
                    + "its terminal showed:\n\(r["tail"] as? String ?? "")")
        }
        let compiled = r["compiled"] as? Int ?? -1
        let linked = r["linked"] as? Int ?? -1
        print("  make demo: \(compiled) modules compiled, \(linked) links on the way (0 and 0: the release build was reused)")
        report("make demo after a build, seconds to the first screen", value: first, unit: "s", limit: 10, higherIsBetter: false)

        let record = ".build/make-test-seconds"
        if let text = try? String(contentsOfFile: record, encoding: .utf8),
            let seconds = Double(text.trimmingCharacters(in: .whitespacesAndNewlines))
        {
            let attributes = try? FileManager.default.attributesOfItem(atPath: record)
            let when = (attributes?[.modificationDate] as? Date).map { ISO8601DateFormatter().string(from: $0) } ?? "?"
            report(
                "make test wall time (its last successful run here, \(when))", value: seconds, unit: "s", limit: 1200,
                higherIsBetter: false)
        } else {
            print("  make test wall time: not measured here (no \(record): run make test on this clone first)")
        }
    }
}
