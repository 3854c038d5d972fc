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
    case .run(let command, let invocation):
        code = try command.action!(invocation)
    }
} catch let error as UsageError {
    FileHandle.standardError.write(Data("rollout: \(error.message)\n".utf8))
    code = .usage
} catch let error as CommandError {
    FileHandle.standardError.write(Data("rollout: \(error.message)\n".utf8))
    code = error.exitCode
} catch {
    FileHandle.standardError.write(Data("rollout: \(error)\n".utf8))
    code = .failure
}
fflush(nil)
exit(code.rawValue)
