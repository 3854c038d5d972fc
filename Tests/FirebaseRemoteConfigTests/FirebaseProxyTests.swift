import FirebaseFake
import Foundation
import TestSupport
import Testing

/// HTTPS through a forward proxy, as behind a corporate one: `HTTPS_PROXY` sends every call (the token endpoint
/// and the API) through a CONNECT tunnel, with the certificate still verified end to end; `NO_PROXY` names hosts
/// reached directly; a proxy that cannot be reached is a one-line error, nothing written.
@Suite(.serialized)
struct FirebaseProxyTests {
    /// A CONNECT proxy on loopback (Tests/FirebaseFake/connect_proxy.py) and the log of its tunnels.
    final class Proxy {
        let process = Process()
        /// Closed to stop the proxy.
        let input = Pipe()
        let port: Int
        let log: String

        init(directory: URL) throws {
            log = directory.appendingPathComponent("proxy-\(UUID().uuidString).log").path
            FileManager.default.createFile(atPath: log, contents: nil)
            let script = TestSupport.packageRoot.appendingPathComponent("Tests/FirebaseFake/connect_proxy.py").path
            process.executableURL = URL(fileURLWithPath: try TestSupport.python())
            process.arguments = [script, log]
            let out = Pipe()
            process.standardOutput = out
            process.standardInput = input
            try process.run()
            var line: [UInt8] = []
            while true {
                guard let b = out.fileHandleForReading.readData(ofLength: 1).first else {
                    throw TestSupport.Failure("the proxy exited before it was ready")
                }
                if b == 10 { break }
                line.append(b)
            }
            guard let p = Int(String(decoding: line, as: UTF8.self)) else {
                throw TestSupport.Failure("the proxy said \(String(decoding: line, as: UTF8.self))")
            }
            port = p
        }

        var tunnels: [String] {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        deinit {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
    }

    @Test func callsGoThroughTheProxyUnlessNoProxyNamesTheHost() throws {
        let fake = try FakeFirebase(template: existingTemplate, tls: true)
        let proxy = try Proxy(directory: fake.directory)
        let via = ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)", "NO_PROXY": "", "no_proxy": ""]

        let initialised = try fake.rollout(["init", "--seed", "rollout-proxy"], environment: via)
        #expect(initialised.status == 0, "\(initialised.stderr)")
        let set = try fake.rollout(["set", "5", "--reason", "through the proxy"], environment: via)
        #expect(set.status == 0, "\(set.stderr)")
        let tunnels = proxy.tunnels
        #expect(tunnels.count >= 2, "\(tunnels)")
        #expect(tunnels.allSatisfy { $0 == "CONNECT localhost:\(fake.port)" }, "\(tunnels)")
        #expect(try fake.headNumber() == 3)

        // NO_PROXY names the host: reached directly, the proxy sees nothing more.
        let direct = try fake.rollout(
            ["nudge", "+1", "--reason", "direct"], environment: via.merging(["NO_PROXY": "localhost"]) { _, b in b })
        #expect(direct.status == 0, "\(direct.stderr)")
        #expect(proxy.tunnels.count == tunnels.count, "\(proxy.tunnels)")
        #expect(try fake.headNumber() == 4)

        // A proxy that is not there: one line naming the cause, exit 1, nothing published.
        let closed = try fake.rollout(
            ["nudge", "+1", "--reason", "must not land"], environment: ["HTTPS_PROXY": "http://127.0.0.1:9"])
        print("proxy closed: \(closed.stderr)", terminator: "")
        #expect(closed.status == 1, "\(closed.stderr)")
        #expect(closed.stderr.split(separator: "\n").filter { !$0.isEmpty }.count == 1, "\(closed.stderr)")
        #expect(closed.stderr.lowercased().contains("proxy") || closed.stderr.contains("127.0.0.1"), "\(closed.stderr)")
        #expect(try fake.headNumber() == 4)
    }
}
