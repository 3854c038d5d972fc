import Foundation
import JSON

/// The strict fake of Google's APIs (Tests/FirebaseFake/fake_remote_config.py), started for a benchmark with a
/// service-account key of its own, and stopped when this value is closed.
final class BenchGoogleFake {
    let origin: String
    /// A service-account key whose token endpoint is the fake's.
    let serviceAccount: JSONValue
    private let process: Process
    private let input: Pipe

    init(project: String, in dir: URL, extra: [String] = []) throws {
        let python = try peerPython()
        let root = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        let script = root.appendingPathComponent("Tests/FirebaseFake/fake_remote_config.py").path
        let privatePEM = dir.appendingPathComponent("sa.pem").path
        let publicPEM = dir.appendingPathComponent("sa.pub.pem").path
        let keygen = Process()
        keygen.executableURL = URL(fileURLWithPath: python)
        keygen.arguments = [script, "keygen", privatePEM, publicPEM]
        try keygen.run()
        keygen.waitUntilExit()
        let email = "bench@\(project).iam.gserviceaccount.com"
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [
            script, "--project", project, "--project-number", "1", "--client-email", email, "--public-key", publicPEM,
            "--key-id", "bench",
        ] + extra
        input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var line: [UInt8] = []
        while true {
            guard let b = output.fileHandleForReading.readData(ofLength: 1).first else { throw BenchError("the fake exited") }
            if b == 10 { break }
            line.append(b)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).dropFirst(5)) else {
            throw BenchError("the fake said \(String(decoding: line, as: UTF8.self))")
        }
        origin = "http://127.0.0.1:\(port)"
        serviceAccount = [
            "type": "service_account", "private_key_id": "bench",
            "private_key": .string(try String(contentsOfFile: privatePEM, encoding: .utf8)), "client_email": .string(email),
            "token_uri": .string(origin + "/token"),
        ]
    }

    func close() {
        try? input.fileHandleForWriting.close()
        process.terminate()
        process.waitUntilExit()
    }
}
