import Foundation

/// What a user runs: whole `rollout` processes timed against peers doing the same work, each sample at least a
/// second long (short commands are repeated back to back), the median of five samples with their spread.
enum WholeProcessBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "cli-evaluate", title: "rollout evaluate, 1M ids, whole process", run: evaluate),
        BenchSuite(name: "cli-startup", title: "start-up: rollout --help, whole process", run: startup),
        BenchSuite(name: "cli-nudge", title: "rollout nudge, whole process, against a durable sqlite3 transaction", run: nudge),
        BenchSuite(name: "cli-idle-console", title: "rollout console on a pseudo-terminal: bytes written while idle", run: idleConsole),
    ]

    /// The `rollout` binary built beside this benchmark.
    static func rolloutBinary() throws -> String {
        let here = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let path = here.appendingPathComponent("rollout").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw BenchError("no rollout binary beside the benchmark at \(path): build with swift build -c release")
        }
        return path
    }

    // MARK: Timing processes

    /// One command line: executable, arguments, and where standard input comes from.
    struct Run {
        var executable: String
        var arguments: [String]
        var stdin: String? = nil
    }

    /// Seconds of one run of `run`, output discarded; a failing run is an error with its status.
    static func once(_ run: Run) throws -> Double {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, run.stdin ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([run.executable] + run.arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let start = Stopwatch.nanoseconds()
        guard posix_spawn(&pid, run.executable, &actions, nil, argv, environ) == 0 else {
            throw BenchError("cannot start \(run.executable)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let seconds = Double(Stopwatch.nanoseconds() - start) / 1e9
        guard status == 0 else {
            throw BenchError("\(run.executable) \(run.arguments.joined(separator: " ")) exited with status \(status)")
        }
        return seconds
    }

    /// The median of five samples of `run`, each at least a second of back-to-back runs.
    static func time(_ run: Run) throws -> Timing { try Timing.measure { _ = try once(run) } }

    static func show(_ label: String, _ t: Timing) {
        print("  \(label): median \(formatFigure(t.median * 1000)) ms per run  (\(t.spread))")
    }

    // MARK: evaluate

    static let cProgram = #"""
        /* The same output as `rollout evaluate` for a one-condition template: id<TAB>true|false per line. */
        #include <openssl/sha.h>
        #include <stdint.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        int main(int argc, char **argv) {
            const char *seed = argv[1];
            unsigned long long threshold = strtoull(argv[2], 0, 10);
            SHA256_CTX prefix;
            SHA256_Init(&prefix);
            SHA256_Update(&prefix, seed, strlen(seed));
            SHA256_Update(&prefix, ".", 1);
            static char out[1 << 20];
            size_t used = 0;
            char *line = 0;
            size_t cap = 0;
            ssize_t n;
            while ((n = getline(&line, &cap, stdin)) > 0) {
                if (line[n - 1] == '\n') n--;
                SHA256_CTX c = prefix;
                unsigned char d[32];
                SHA256_Update(&c, line, n);
                SHA256_Final(d, &c);
                /* The digest as four big-endian words; 2^192, 2^128, 2^64 mod 10^8 fold it without 256-bit division. */
                uint64_t w[4];
                for (int i = 0; i < 4; i++) {
                    uint64_t x = 0;
                    for (int j = 0; j < 8; j++) x = x << 8 | d[8 * i + j];
                    w[i] = x;
                }
                const uint64_t m = 100000000u;
                uint64_t p = ((w[0] % m) * 34512896u + (w[1] % m) * 68211456u + (w[2] % m) * 9551616u + w[3] % m) % m;
                const char *v = p <= threshold ? "true\n" : "false\n";
                size_t vl = strlen(v);
                if (used + n + 1 + vl > sizeof out) { fwrite(out, 1, used, stdout); used = 0; }
                memcpy(out + used, line, n); used += n; out[used++] = '\t';
                memcpy(out + used, v, vl); used += vl;
            }
            fwrite(out, 1, used, stdout);
            return 0;
        }
        """#

    static func evaluate() throws {
        let rollout = try rolloutBinary()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-cli-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ids = dir.appendingPathComponent("ids.txt").path
        let template = dir.appendingPathComponent("t.json").path
        let cSource = dir.appendingPathComponent("peer.c").path
        let cBinary = dir.appendingPathComponent("peer").path
        try (RemoteConfigBench.fidLikeIds(1_000_000).joined(separator: "\n") + "\n").write(toFile: ids, atomically: true, encoding: .utf8)
        try RemoteConfigBench.benchTemplate.prettyText.write(toFile: template, atomically: true, encoding: .utf8)
        try cProgram.write(toFile: cSource, atomically: true, encoding: .utf8)
        _ = try runCapture("/usr/bin/cc", ["-O2", "-o", cBinary, cSource, "-lcrypto"])

        // The three produce the same lines; checked once before timing.
        let ours = try runCapture("/bin/sh", ["-c", "'\(rollout)' evaluate --template '\(template)' --ids-file '\(ids)'"])
        let c = try runCapture("/bin/sh", ["-c", "'\(cBinary)' rollout-2026 10000000 < '\(ids)'"])
        guard ours == c else { throw BenchError("rollout evaluate and the C program disagree") }
        let python = try peerPython()
        let peer = try runCapture(python, ["scripts/rc_peer.py", "--tsv", template, ids, "AppAttestEnabled"])
        guard peer == ours else { throw BenchError("rollout evaluate and firebase-admin disagree") }
        print("  1,000,000 FID-like ids: the three outputs are identical (\(ours.utf8.count) bytes)")

        let oursT = try time(Run(executable: rollout, arguments: ["evaluate", "--template", template, "--ids-file", ids]))
        let cT = try time(Run(executable: cBinary, arguments: ["rollout-2026", "10000000"], stdin: ids))
        let peerT = try time(Run(executable: python, arguments: ["scripts/rc_peer.py", "--tsv", template, ids, "AppAttestEnabled"]))
        show("rollout evaluate", oursT)
        show("C + libcrypto SHA256_*", cT)
        show("firebase-admin 7.7.0", peerT)
        let rate = { (t: Timing) in 1_000_000 / t.median }
        report("rollout evaluate (whole process)", value: rate(oursT), unit: "ids/s", against: ("firebase-admin 7.7.0", rate(peerT)), target: (30, true))
        report("rollout evaluate (whole process)", value: rate(oursT), unit: "ids/s", against: ("C + libcrypto", rate(cT)), target: (0.5, true))
    }

    // MARK: start-up

    static func startup() throws {
        let rollout = try rolloutBinary()
        let help = try time(Run(executable: rollout, arguments: ["--help"]))
        let bare = try time(Run(executable: "/bin/true", arguments: []))
        show("rollout --help", help)
        show("/bin/true (process start-up floor)", bare)
        // What the dynamic loader has to load and bind before main: release builds link the native libraries
        // statically and open libpq, libcurl, libmicrohttpd and libqrencode on first use.
        let needed = try runCapture("/usr/bin/readelf", ["-d", rollout]).split(separator: "\n")
            .filter { $0.contains("(NEEDED)") }.compactMap { $0.split(separator: "[").last?.dropLast() }
        print("  shared libraries loaded at start-up: \(needed.joined(separator: ", "))")
        report("rollout --help (whole process)", value: help.median * 1000, unit: "ms", limit: 5, higherIsBetter: false)
    }

    // MARK: nudge

    /// `rollout nudge` (open the store, read, policies, compare-and-swap publish with its audit record, exit)
    /// against `sqlite3` doing one durable transaction of the same shape on a file with the same pragmas.
    static func nudge() throws {
        let rollout = try rolloutBinary()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-nudge-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("rollout.db").path
        let bare = dir.appendingPathComponent("bare.db").path
        _ = try runCapture(rollout, ["init", "--store", store, "--seed", "rollout-bench"])
        _ = try runCapture(rollout, ["set", "10", "--store", store, "--reason", "bench"])
        _ = try runCapture(
            "/usr/bin/sqlite3",
            [
                bare,
                "PRAGMA journal_mode=WAL; CREATE TABLE versions (n INTEGER PRIMARY KEY, etag TEXT, template TEXT); "
                    + "CREATE TABLE audit (seq INTEGER PRIMARY KEY, prev TEXT, record TEXT);",
            ])
        // Alternate up and down so the rollout stays inside its range however many runs calibration takes.
        var up = true
        var nudges: [Double] = []
        var transactions: [Double] = []
        let sql =
            "PRAGMA synchronous=FULL; BEGIN IMMEDIATE; SELECT max(n) FROM versions; "
            + "INSERT INTO versions (etag, template) VALUES (hex(randomblob(8)), printf('%.4000c', 'x')); "
            + "INSERT INTO audit (prev, record) VALUES (hex(randomblob(32)), printf('%.300c', 'y')); COMMIT;"
        // 500 pairs, a nudge then a transaction: each pair shares the machine's state of the moment, and the p99 is
        // the fifth-slowest of each rather than the second.
        for _ in 0..<500 {
            nudges.append(
                try once(Run(executable: rollout, arguments: ["nudge", up ? "+0.1" : "-0.1", "--store", store, "--reason", "bench"])))
            up.toggle()
            transactions.append(try once(Run(executable: "/usr/bin/sqlite3", arguments: [bare, sql])))
        }
        func percentile(_ xs: [Double], _ p: Double) -> Double { xs.sorted()[min(xs.count - 1, Int(Double(xs.count) * p))] }
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            report(
                "rollout nudge \(name) (whole process)", value: percentile(nudges, p) * 1000, unit: "ms",
                against: ("sqlite3 durable transaction \(name)", percentile(transactions, p) * 1000), target: (2, false))
        }
    }

    // MARK: idle console

    /// Hosts one command on a pseudo-terminal (120×40, TERM=xterm-256color): waits for the first frame (output,
    /// then 1.5 s of silence, at most 20 s), then counts the bytes written over windows of IDLE seconds, each
    /// played into a `pyte` screen: a window in which the screen changed (the timeline's time axis moves one
    /// column a minute) is set aside and another taken, up to 4. Then sends `q` and, if the command has not exited
    /// 5 s later, SIGKILL. Prints {"first": bytes, "idle": bytes of the first window without a change (null if
    /// none), "changed": [bytes of each window with a change], "exit": code}.
    static let ptyHost = """
        import json, os, pty, select, signal, struct, sys, time, fcntl, termios
        import pyte
        idle_seconds, argv = float(sys.argv[1]), sys.argv[2:]
        screen = pyte.Screen(120, 40)
        stream = pyte.ByteStream(screen)
        pid, fd = pty.fork()
        if pid == 0:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.environ["TERM"] = "xterm-256color"
            os.execv(argv[0], argv)
        def read_for(seconds, stop_after_quiet=None):
            n, end, last = 0, time.monotonic() + seconds, None
            while True:
                now = time.monotonic()
                if now >= end or (stop_after_quiet and last is not None and now - last >= stop_after_quiet):
                    return n
                r, _, _ = select.select([fd], [], [], min(end - now, 0.1))
                if r:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        return n
                    if not chunk:
                        return n
                    stream.feed(chunk)
                    n, last = n + len(chunk), time.monotonic()
        first = read_for(20, stop_after_quiet=1.5)
        idle, changed = None, []
        for _ in range(4):
            before = list(screen.display)
            n = read_for(idle_seconds)
            if list(screen.display) == before:
                idle = n
                break
            changed.append(n)
        os.write(fd, b"q")
        code, deadline = None, time.monotonic() + 5
        while time.monotonic() < deadline:
            read_for(0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
        if code is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        json.dump({"first": first, "idle": idle, "changed": changed, "exit": code}, sys.stdout)
        """

    /// `rollout console` on a fresh store, idle: after its first frame nothing on the screen changes, so nothing
    /// should be written (target 0 bytes over about 5 s).
    static func idleConsole() throws {
        let rollout = try rolloutBinary()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-console-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("rollout.db").path
        _ = try runCapture(rollout, ["init", "--store", store, "--seed", "rollout-bench"])
        _ = try runCapture(rollout, ["set", "10", "--store", store, "--reason", "bench"])
        let seconds = 5.0
        let out = try runCapture(try peerPython(), ["-c", ptyHost, String(seconds), rollout, "console", "--store", store])
        guard let data = out.data(using: .utf8), let r = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let first = r["first"] as? Int, let changed = r["changed"] as? [Int]
        else { throw BenchError("the pty host printed '\(out)'") }
        guard first > 0 else { throw BenchError("rollout console drew nothing on the pseudo-terminal in 20 s") }
        for bytes in changed {
            print("  a \(Int(seconds)) s window in which the screen changed (the time axis moved): \(bytes) bytes, set aside")
        }
        guard let idle = r["idle"] as? Int else {
            throw BenchError("the screen changed in every one of \(changed.count) idle windows of \(Int(seconds)) s")
        }
        print("  first frame: \(first) bytes; then \(idle) bytes in \(Int(seconds)) s idle with the screen unchanged; exit \(r["exit"].map { "\($0)" } ?? "?")")
        report("idle rollout console (whole process, 120×40 pty)", value: Double(idle), unit: "bytes", limit: 0, higherIsBetter: false)
    }
}
