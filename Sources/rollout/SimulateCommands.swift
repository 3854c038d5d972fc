import CommandLineKit

enum SimulateCommands {
    static let all: [Command] = []
}
