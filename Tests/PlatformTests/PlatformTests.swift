import Foundation
import Platform
import TestSupport
import Testing

@Suite("Platform")
struct PlatformTests {
    @Test("the kernel's copy of the arguments splits at each NUL, empty arguments kept")
    func programArguments() {
        #expect(ProgramArguments.split(Array("rollout\0kill\0\0--reason\0x y\0".utf8)) == ["rollout", "kill", "", "--reason", "x y"])
        #expect(ProgramArguments.split(Array("a\0b".utf8)) == ["a", "b"])
        #expect(ProgramArguments.split([]) == [])
        #expect(ProgramArguments.split([0]) == [""])
        // What the process itself was given (this test binary's own arguments are never empty).
        #expect(ProgramArguments.current() == CommandLine.arguments)
    }

    @Test("cFormat prints as printf does, with a full stop whatever the locale")
    func formatting() {
        #expect(cFormat("%.2f", 3.14159) == "3.14")
        #expect(cFormat("%+.3f pp", 0.5) == "+0.500 pp")
        #expect(cFormat("%.1e", 0.000012) == "1.2e-05")
        #expect(cFormat("%04lld-%02lld", Int64(7), Int64(3)) == "0007-03")
        #expect(cFormat("\\u%04x", UInt32(0x1F)) == "\\u001f")
        #expect(cFormat("byte 0x%02X", UInt8(0xAB)) == "byte 0xAB")
        #expect(cFormat("%.2g%%", 0.0042) == "0.0042%")
        // Longer than the first buffer.
        let long = cFormat("%0300d", Int32(1))
        #expect(long.count == 300 && long.hasSuffix("1") && long.hasPrefix("000"))
        // A locale with a decimal comma, when the machine has one, changes nothing.
        if let previous = setlocale(LC_NUMERIC, nil).map({ String(cString: $0) }),
            setlocale(LC_NUMERIC, "de_DE.UTF-8") != nil || setlocale(LC_NUMERIC, "fr_FR.UTF-8") != nil
        {
            defer { setlocale(LC_NUMERIC, previous) }
            #expect(cFormat("%.1f", 2.5) == "2.5")
        }
    }

    @Test(
        "paths are cut as NSString cut them",
        arguments: [
            ("a/b/c", "a/b", "c"), ("a", "", "a"), ("/a", "/", "a"), ("/", "/", "/"), ("a/b/", "a", "b"),
            ("/x//y", "/x", "y"),
        ])
    func paths(_ path: String, _ directory: String, _ last: String) {
        #expect(Path.directory(of: path) == directory)
        #expect(Path.lastComponent(of: path) == last)
        // corelibs Foundation traps on a path without a slash, so only the others are compared with it.
        if path.contains("/") {
            #expect(Path.directory(of: path) == (path as NSString).deletingLastPathComponent)
            #expect(Path.lastComponent(of: path) == (path as NSString).lastPathComponent)
        }
    }

    @Test("the empty path (where corelibs Foundation's deletingLastPathComponent traps)")
    func emptyPath() {
        #expect(Path.directory(of: "") == "" && Path.lastComponent(of: "") == "")
    }

    @Test("extensions go as NSString drops them", arguments: ["c.txt", ".profile", "a.b.c", "plain", "x."])
    func extensions(_ name: String) {
        #expect(Path.deletingExtension(name) == (name as NSString).deletingPathExtension)
    }

    @Test("files: prefix reads, atomic replacement, directories, and the system's reason on failure")
    func files() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("platform-\(getpid())-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        try Files.makeDirectories(root + "/a/b", mode: 0o700)
        var st = stat()
        #expect(stat(root + "/a/b", &st) == 0 && st.st_mode & 0o777 == 0o700)
        let file = root + "/a/b/f"
        try Files.writeAtomically(file, Array("hello".utf8))
        #expect(try Files.read(file) == Array("hello".utf8))
        #expect(try Files.read(file, limit: 2) == Array("he".utf8))
        #expect(Files.size(file) == 5)
        try Files.writeAtomically(file, Array("bye".utf8))
        #expect(try Files.read(file) == Array("bye".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/a/b") == ["f"])  // no temporary left
        #expect(throws: FileError.self) { try Files.read(root + "/missing") }
        do {
            _ = try Files.read(root)
            Issue.record("a directory read as a file")
        } catch { #expect(error.code == EISDIR && error.description.hasSuffix("Is a directory")) }
        do {
            try Files.writeAtomically(root + "/no/such/dir/f", [1])
            Issue.record("wrote into a missing directory")
        } catch { #expect(error.code == ENOENT) }
        #expect(Files.size(root + "/missing") == nil)
        #expect(Files.isDirectory(root + "/a/b") == true)
        #expect(Files.isDirectory(file) == false)
        #expect(Files.isDirectory(root + "/missing") == nil)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: root + "/a")
        #expect(Files.isDirectory(root + "/link") == true)  // followed, as FileManager.fileExists does
    }

    @Test("the host name is the one Foundation reports")
    func hostName() {
        #expect(CurrentUser.hostName == ProcessInfo.processInfo.hostName)
        #expect(!CurrentUser.hostName.isEmpty)
    }

    @Test("a shell command's status and standard output")
    func shell() throws {
        let ok = try runShell("printf 'tok\\n'; echo err >&2")
        #expect(ok.status == 0 && ok.output == Array("tok\n".utf8))
        #expect(try runShell("exit 3").status == 3)
        #expect(try runShell("read x; echo \"[$x]\"").output == Array("[]\n".utf8))  // stdin is /dev/null
        #expect(try runShell("kill -TERM $$").status == 128 + SIGTERM)
    }

    /// The command of `shellEndedWithItsGroup`: a `sleep` started by the shell, its pid written to `file`.
    static func sleeper(_ file: String) -> String { "sleep 30 & echo $! > \(file); wait; echo tok" }

    @Test("a shell command is killed with its process group once cancelled, or once its time bound passes")
    func shellEndedWithItsGroup() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("shell-group-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for (i, how) in ["stopped", "deadline"].enumerated() {
            let file = dir.appendingPathComponent("sleep-\(i).pid").path
            let cancellation = how == "deadline" ? Cancellation(seconds: 0.5) : Cancellation()
            if how == "stopped" {
                Thread.detachNewThread {
                    // Cancelled once the shell has started its sleep (or after 10 s regardless).
                    _ = TestSupport.eventually(within: 10) { FileManager.default.fileExists(atPath: file) }
                    cancellation.cancel()
                }
            }
            let start = Date()
            var failure: ChildProcessError?
            do { _ = try runShell(Self.sleeper(file), cancellation: cancellation) } catch { failure = error }
            let took = Date().timeIntervalSince(start)
            #expect(failure?.cancelled == true, "\(how): \(String(describing: failure))")
            #expect(took < 5, "\(how): the command ran \(took) s")
            let sleeper = try #require(
                Int32(
                    (try? String(contentsOfFile: file, encoding: .utf8))?.trimmingCharacters(
                        in: .whitespacesAndNewlines) ?? ""))
            // The shell's child dies with it: nothing of the command is left running.
            #expect(
                TestSupport.eventually(within: 5) { !TestSupport.isRunning(sleeper) }, "\(how): the shell's sleep \(sleeper) survived")
        }
    }

    @Test("a shell command that prints more than its output limit is ended and refused, having cost no more")
    func shellOutputLimit() throws {
        for cancellation: Cancellation? in [nil, Cancellation()] {
            let start = Date()
            var failure: ChildProcessError?
            // 100 MB of output, from the shell's own child or from a pipeline: refused at 1,000 bytes.
            for command in ["head -c 100000000 /dev/zero", "yes | head -c 100000000"] {
                do { _ = try runShell(command, outputLimit: 1000, cancellation: cancellation) } catch {
                    failure = error
                }
                #expect(failure?.outputLimit == 1000, "\(command): \(String(describing: failure))")
            }
            #expect(Date().timeIntervalSince(start) < 5)
        }
        #expect(try runShell("printf 'tok\\n'", outputLimit: 4).output == Array("tok\n".utf8))
    }

    @Test("a condition times out when nobody signals, and wakes when signalled")
    func condition() {
        let c = Condition()
        c.lock()
        #expect(c.wait(seconds: 0.01) == false)
        c.unlock()
        let flag = Lock()
        nonisolated(unsafe) var ready = false
        detachThread {
            c.withLock {
                flag.withLock { ready = true }
                c.signal()
            }
        }
        c.lock()
        var woke = true
        while !flag.withLock({ ready }) {
            if !c.wait(seconds: 10) {
                woke = false
                break
            }
        }
        c.unlock()
        #expect(woke)
    }

    @Test("a recursive lock can be taken twice by its holder")
    func recursive() {
        let l = RecursiveLock()
        let n = l.withLock { l.withLock { 42 } }
        #expect(n == 42)
    }

    @Test("percent-encoding keeps letters, digits and the given characters")
    func percent() {
        #expect(percentEncoded("a b/c~é", keeping: "-._~") == "a%20b%2Fc~%C3%A9")
        #expect(percentEncoded("p:1/x", keeping: "-._~:/") == "p:1/x")
    }

    @Test("padding cuts or fills to the width, as Foundation's padding(toLength:) does")
    func padding() {
        for (s, w) in [("abc", 5), ("abcdef", 3), ("", 2), ("é", 1)] {
            #expect(s.padded(to: w) == s.padding(toLength: w, withPad: " ", startingAt: 0))
        }
    }
}
