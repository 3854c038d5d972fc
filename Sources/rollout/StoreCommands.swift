import CommandLineKit

enum StoreCommands {
    static let all: [Command] = []
}
