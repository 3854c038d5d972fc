import CommandLineKit
import RolloutApp

enum SimulateCommands {
    static let all: [Command] = []
}
