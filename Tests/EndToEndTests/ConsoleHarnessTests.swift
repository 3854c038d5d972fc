import Foundation
import Testing

/// Proves the terminal harness itself against a tiny shell program, before it is trusted with the console.
@Suite("Terminal harness (tmux)")
struct ConsoleHarnessTests {
    static let echoLoop = [
        "sh", "-c",
        "printf 'ready TERM=%s\\n' \"$TERM\"; while read line; do [ \"$line\" = quit ] && exit 7; printf 'got:%s size:%s\\n' \"$line\" \"$(stty size)\"; done",
    ]

    @Test("waits for text, types, presses keys, reads the exit status")
    func roundTrip() throws {
        let session = try TerminalSession(Self.echoLoop, width: 60, height: 12)
        defer { session.close() }
        try session.waitFor("ready TERM=tmux-256color")
        try session.type("hello world")
        try session.press("Enter")
        try session.waitFor("got:hello world size:12 60")
        try session.type("quit")
        try session.press("Enter")
        #expect(try session.exitStatus() == 7)
    }

    @Test("resizing changes the size the program sees")
    func resize() throws {
        let session = try TerminalSession(Self.echoLoop, width: 60, height: 12)
        defer { session.close() }
        try session.waitFor("ready")
        try session.resize(width: 40, height: 10)
        try session.type("x")
        try session.press("Enter")
        try session.waitFor("got:x size:10 40")
    }

    @Test("the environment can be set and unset for the program")
    func environment() throws {
        let session = try TerminalSession(
            ["sh", "-c", "printf '[%s][%s]\\n' \"${TERM-unset}\" \"$GREETING\"; sleep 5"],
            environment: ["TERM": nil, "GREETING": "it's here"])
        defer { session.close() }
        try session.waitFor("[unset][it's here]")
    }

    @Test("a timeout reports what was on the screen")
    func timeout() throws {
        let session = try TerminalSession(["sh", "-c", "echo something else; sleep 5"])
        defer { session.close() }
        try session.waitFor("something else")
        #expect(throws: TerminalSession.Failure.self) { try session.waitFor("never shown", timeout: 0.3) }
    }
}

extension ConsoleHarnessTests {
    @Test("Ctrl-C and signals reach the program; the exit status says which")
    func signals() throws {
        let session = try TerminalSession(["sh", "-c", "echo waiting; sleep 30"])
        defer { session.close() }
        try session.waitFor("waiting")
        try session.press("C-c")
        #expect(try session.exitStatus() == 130)

        let second = try TerminalSession(["sleep", "30"])
        defer { second.close() }
        let pid = try second.programPID()
        #expect(kill(pid, SIGTERM) == 0)
        #expect(try second.exitStatus() == 143)
    }
}
