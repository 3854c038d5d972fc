import COpenSSL
import Foundation
import JSON
import RemoteConfig

/// Percentile evaluation: ours vs firebase-admin's evaluator (the peer) vs a bare SHA-256 loop (the ceiling).
enum RemoteConfigBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "evaluate", title: "Remote Config evaluations per second (one core)", run: run)
    ]

    static func fidLikeIds(_ n: Int) -> [String] {
        var state: UInt64 = 42
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        return (0..<n).map { _ in
            var s = ""
            for _ in 0..<22 {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                s.append(alphabet[Int(state >> 58)])
            }
            return s
        }
    }

    /// One percent condition at 10% on seed rollout-2026, server form.
    static let benchTemplate: JSONValue = [
        "conditions": [
            [
                "name": "app_attest_rollout",
                "condition": [
                    "orCondition": [
                        "conditions": [
                            [
                                "andCondition": [
                                    "conditions": [
                                        ["percent": ["percentOperator": "LESS_OR_EQUAL", "seed": "rollout-2026", "microPercent": 10_000_000]]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ],
            ]
        ],
        "parameters": [
            "AppAttestEnabled": ["defaultValue": ["value": "false"], "conditionalValues": ["app_attest_rollout": ["value": "true"]]]
        ],
    ]

    static func run() throws {
        let templateJSON = benchTemplate
        let template = try RemoteConfigTemplate(json: templateJSON)
        let evaluator = TemplateEvaluator(template)
        let ids = fidLikeIds(1_000_000)

        // Ours: the full evaluation of the parameter for each id (the API the rest of the product calls).
        var enabled = 0
        let oursSeconds = Stopwatch.time {
            for id in ids where evaluator.value(of: "AppAttestEnabled", for: EvaluationContext(randomizationId: id)).value == "true" {
                enabled += 1
            }
        }
        // The `evaluate` command's loop: ids as UTF-8 bytes through a compiled parameter to a result index.
        let program = evaluator.program(for: "AppAttestEnabled")!
        let trueIndex = program.results.firstIndex { $0.value == "true" }!
        let lines = ids.map { Array($0.utf8) }
        var enabledBytes = 0
        let bytesSeconds = Stopwatch.time {
            for line in lines where line.withUnsafeBytes({ program.resultIndex(utf8: $0) }) == trueIndex { enabledBytes += 1 }
        }
        let oursBytes = Double(lines.count) / bytesSeconds
        let ours = Double(ids.count) / oursSeconds

        // The ceiling: one libcrypto SHA-256 of the same "seed.id" bytes per id, nothing else. The low-level
        // SHA256_Init/Update/Final calls the block function directly (OpenSSL 3's one-shot SHA256() fetches the
        // algorithm from a provider on every call and is three times slower), so this is the fastest honest loop.
        let inputs = ids.map { Array("rollout-2026.\($0)".utf8) }
        var digest = [UInt8](repeating: 0, count: 32)
        var sink: UInt8 = 0
        var ctx = SHA256_CTX()
        let shaSeconds = Stopwatch.time {
            for input in inputs {
                input.withUnsafeBufferPointer { b in
                    SHA256_Init(&ctx)
                    SHA256_Update(&ctx, b.baseAddress, b.count)
                    SHA256_Final(&digest, &ctx)
                }
                sink ^= digest[0]
            }
        }
        let sha = Double(inputs.count) / shaSeconds

        // The peer: firebase-admin 7.7.0 evaluating the same template for the first 60,000 ids (over a second at
        // its rate), five runs; the figure is the median run's rate.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let tpath = dir.appendingPathComponent("t.json").path
        let ipath = dir.appendingPathComponent("ids.txt").path
        try templateJSON.prettyText.write(toFile: tpath, atomically: true, encoding: .utf8)
        try (ids.prefix(60_000).joined(separator: "\n") + "\n").write(toFile: ipath, atomically: true, encoding: .utf8)
        let peerRuns = try (0..<5).map { _ in
            let out = try runCapture(try peerPython(), ["scripts/rc_peer.py", "--bench", tpath, ipath, "AppAttestEnabled"])
            guard let rate = Double(out.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw BenchError("firebase-admin bench printed '\(out)'")
            }
            return rate
        }.sorted()
        let peer = peerRuns[2]
        print("  firebase-admin 7.7.0, 60,000 ids, median of 5 runs: \(formatFigure(peer)) eval/s (spread \(formatFigure(peerRuns[0]))–\(formatFigure(peerRuns[4])))")

        print("  \(ids.count) FID-like ids, seed rollout-2026, 10%: \(enabled) enabled, \(enabledBytes) via bytes (sink \(sink))")
        // The targets apply to the evaluator's bulk path (compiled parameter, ids as bytes, a result index), which
        // `rollout evaluate` runs; the per-call API also builds an EvaluatedValue with its strings for each id.
        report("ours, bulk path (rollout evaluate)", value: oursBytes, unit: "eval/s", against: ("firebase-admin 7.7.0", peer), target: (30, true))
        report("ours, bulk path (rollout evaluate)", value: oursBytes, unit: "eval/s", against: ("bare libcrypto SHA-256", sha), target: (0.5, true))
        report("ours, per-call API value(of:for:)", value: ours, unit: "eval/s", against: ("firebase-admin 7.7.0", peer))
        report("ours, per-call API value(of:for:)", value: ours, unit: "eval/s", against: ("bare libcrypto SHA-256", sha))
    }
}

/// Runs a program and returns its standard output; a non-zero exit is an error with its standard error.
func runCapture(_ executable: String, _ arguments: [String]) throws -> String {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
        throw BenchError("\(executable) \(arguments.joined(separator: " ")) failed: \(String(decoding: errData, as: UTF8.self))")
    }
    return String(decoding: data, as: UTF8.self)
}
