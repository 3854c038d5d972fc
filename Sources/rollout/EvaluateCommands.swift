import CommandLineKit

enum EvaluateCommands {
    static let all: [Command] = []
}
