import CommandLineKit
import RolloutApp
import Foundation

// The executable: parse, run one command, map every error to one line and an exit code.
let environment = ProcessInfo.processInfo.environment
let root = RootCommand.make()
var code: ExitCode
do {
    switch try root.parse(Array(CommandLine.arguments.dropFirst()), environment: environment) {
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
    FileHandle.standardError.write(Data("rollout: \(error.message)\n".utf8))
    code = .usage
} catch let error as CommandError {
    FileHandle.standardError.write(Data("rollout: \(error.message)\n".utf8))
    code = error.exitCode
} catch {
    // Every other error (a write refused by a read-only connection, a store that cannot be opened, ...) gets the
    // one-line message and exit code that the store commands give it.
    let mapped = StoreCommands.commandError(error)
    FileHandle.standardError.write(Data("rollout: \(mapped.message)\n".utf8))
    code = mapped.exitCode
}
fflush(nil)
exit(code.rawValue)
