import CommandLineKit
import Glibc
import Platform
import RolloutApp

// The executable: parse, run one command, map every error to one line and an exit code.
//
// Foundation stays off this path: its ProcessInfo.environment cost more instructions than `rollout --help`
// spends on its own work, so the environment is read from `environ` (the first definition of a name wins, as
// with getenv), and errors are written to file descriptor 2 directly.
var environment: [String: String] = [:]
// environ is NULL after clearenv().
var entry: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ
while let pair = entry?.pointee {
    let text = String(cString: pair)
    if let equals = text.utf8.firstIndex(of: UInt8(ascii: "=")) {
        let name = String(text[..<equals])
        if environment[name] == nil { environment[name] = String(text[text.index(after: equals)...]) }
    }
    entry = entry! + 1
}

/// One line on standard error (or several, where the message has line ends). Messages quote what came from
/// outside (a file's line, an option's value, a server's words); whatever of it a terminal would act on is shown
/// escaped (`Sanitiser`), here once for every message, the message's own line ends kept.
func complain(_ message: String) {
    let safe = Sanitiser.needsEscape(message)
        ? message.split(separator: "\n", omittingEmptySubsequences: false).map { Sanitiser.escape($0) }.joined(separator: "\n")
        : message
    var line = "rollout: \(safe)\n"
    line.withUTF8 { bytes in
        var rest = UnsafeRawBufferPointer(bytes)
        while !rest.isEmpty {
            let n = write(2, rest.baseAddress, rest.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
        }
    }
}
let root = RootCommand.make()
var code: ExitCode
do {
    switch try root.parse(Array(ProgramArguments.current().dropFirst()), environment: environment) {
    case .help(let command, let path):
        print(command.helpText(path: path, globalOptions: path.count > 1 ? RootCommand.globalOptions : []), terminator: "")
        code = .ok
    case .version:
        print(RootCommand.version)
        code = .ok
    case .run(let command, let invocation):
        // `--store ""` never falls back to another store, for every command alike.
        if invocation.value("--store") == "" {
            throw invocation.usageError("--store needs a file path, not an empty string")
        }
        code = try command.action!(invocation)
    }
} catch let error as UsageError {
    complain(error.message)
    code = .usage
} catch let error as CommandError {
    complain(error.message)
    code = error.exitCode
} catch {
    // Every other error (a write refused by a read-only connection, a store that cannot be opened, ...) gets the
    // one-line message and exit code that the store commands give it.
    let mapped = StoreCommands.commandError(error)
    complain(mapped.message)
    code = mapped.exitCode
}
// A signal at a secret prompt ended the command early (its change refused and audited): say so as a stopped
// program does.
if SecretPrompt.interruption != 0 { code = ExitCode(stoppedBy: SecretPrompt.interruption) }
fflush(nil)
exit(code.rawValue)
