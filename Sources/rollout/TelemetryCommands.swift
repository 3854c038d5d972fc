import CommandLineKit

enum TelemetryCommands {
    static let all: [Command] = []
}
