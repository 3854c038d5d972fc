import CommandLineKit

enum AttestCommands {
    static let all: [Command] = []
}
