import CommandLineKit

enum OperatorCommands {
    static let all: [Command] = []
}
