import CommandLineKit

enum ConsoleCommands {
    static let all: [Command] = []
}
