import Foundation
import Testing
import TestSupport

/// A store file this user may read but not write is a read-only session, as `--read-only` makes one: the console
/// says READ-ONLY and refuses a change before any dialog, the CLI refuses with exit 4, and both say why in the same
/// words (the file cannot be written by this user) instead of SQLite's "attempt to write a readonly database".
@Suite(.serialized)
struct ReadOnlyStoreFileTests {
    /// A store at 10% whose file only the user who runs `prefix` may read: the test's own user after `chmod 0400`,
    /// or, when the tests run as root (whom file modes do not stop), the user nobody, who owns the directory and
    /// its files and runs the commands through setpriv.
    final class Fixture {
        let directory: URL
        let store: String
        let binary: String
        let prefix: [String]

        init() throws {
            binary = try TestSupport.rolloutBinary()
            directory = try TestSupport.temporaryDirectory("read-only-file")
            store = directory.appendingPathComponent("rollout.db").path
            for arguments in [["init"], ["set", "10", "--reason", "start"]] {
                let r = try TestSupport.run(binary, arguments + ["--store", store, "--operator", "bob@example.com"])
                guard r.status == 0 else { throw TestSupport.Failure("\(arguments) failed: \(r.stderr)") }
            }
            if geteuid() == 0 {
                let nobody: uid_t = 65534
                for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) + [""] {
                    guard chown(directory.appendingPathComponent(name).path, nobody, gid_t(nobody)) == 0 else {
                        throw TestSupport.Failure("chown \(name): errno \(errno)")
                    }
                }
                chmod(directory.path, 0o700)
                prefix = ["/usr/bin/setpriv", "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups"]
            } else {
                prefix = []
            }
            chmod(store, 0o400)
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        func cli(_ arguments: String..., stdin: String? = nil) throws -> TestSupport.ProcessResult {
            let command = prefix + [binary] + arguments + ["--store", store, "--operator", "ana@example.com"]
            return try TestSupport.run(command[0], Array(command.dropFirst()), stdin: stdin)
        }

        var sha256: String {
            get throws { try TestSupport.run("/usr/bin/sha256sum", [store]).stdout }
        }
    }

    @Test func theCLIRefusesWritesWithExit4AndSaysWhy() throws {
        let f = try Fixture()
        let before = try f.sha256
        let set = try f.cli("set", "5", "--reason", "lower")
        #expect(set.status == 4, "\(set.stderr)")
        #expect(
            set.stderr.contains("this session is read-only: the store file \(f.store) cannot be written by this user"),
            "\(set.stderr)")
        // A write outside the rollout's write path (telemetry) refuses in the same words.
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let event = #"{"t":\#(now),"i":"e1","k":"session","c":"enabled","p":"appAttest"}"#
        let ingest = try f.cli("ingest", "-", stdin: event + "\n")
        #expect(ingest.status == 4, "\(ingest.stderr) \(ingest.stdout)")
        #expect(ingest.stderr.contains("\(f.store) cannot be written by this user"), "\(ingest.stderr)")
        #expect(!(set.stderr + ingest.stderr).contains("attempt to write a readonly database"))
        #expect(try f.cli("status").status == 0)
        #expect(try f.sha256 == before)
    }

    @Test func theConsoleSaysReadOnlyAndRefusesAChangeBeforeAnyDialog() throws {
        let f = try Fixture()
        let before = try f.sha256
        let command = f.prefix + [f.binary, "console", "--store", f.store, "--operator", "ana@example.com"]
        let session = try TerminalSession(command, width: 160, height: 40)
        defer { session.close() }
        let screen = try session.waitFor("<= 10")
        #expect(screen.contains("READ-ONLY"), "\(screen)")
        try session.press("-")
        let refused = try session.waitFor("cannot be written by this user")
        #expect(refused.contains("Refused: this session is read-only: the store file"), "\(refused)")
        #expect(!refused.contains("Confirm:"), "\(refused)")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
        #expect(try f.sha256 == before)
    }
}
