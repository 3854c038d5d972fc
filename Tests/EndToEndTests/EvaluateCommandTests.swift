import Foundation
import Testing
import TestSupport

/// `rollout evaluate` as an engineer runs it: the shared vectors' ids through the real binary.
struct EvaluateCommandTests {
    @Test func printsFirebaseAdminsValueForEveryVectorId() throws {
        let tsv = try String(contentsOf: TestSupport.vector("remote-config/rollout-2026-10pct.tsv"), encoding: .utf8)
        let rows = tsv.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t") }
        let ids = rows.map { String($0[0]) }.joined(separator: "\n") + "\n"
        let template = try TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json").path
        let result = try TestSupport.run(try TestSupport.rolloutBinary(), ["evaluate", "--template", template, "--ids-file", "-"], stdin: ids)
        #expect(result.status == 0, "\(result.stderr)")
        let expected = rows.map { "\($0[0])\t\($0[1])" }.joined(separator: "\n") + "\n"
        #expect(result.stdout == expected)
    }

    @Test func jsonFormatCarriesTheSourceAndCondition() throws {
        let template = try TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json").path
        let result = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["evaluate", "--template", template, "--ids-file", "-", "--format", "json"], stdin: "inst-0\n\n")
        #expect(result.status == 0)
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines[0] == #"{"id":"inst-0","value":"false","source":"remote","condition":null}"#)
        #expect(lines[1] == #"{"id":"","value":"false","source":"remote","condition":null}"#)
    }

    @Test func opaqueConditionsAreNotedOnStandardError() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("t.json").path
        try """
        {"conditions": [{"name": "ios", "expression": "device.os == 'ios' && percent('s') <= 100"}],
         "parameters": {"AppAttestEnabled": {"defaultValue": {"value": "false"}, "conditionalValues": {"ios": {"value": "true"}}}}}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try TestSupport.run(try TestSupport.rolloutBinary(), ["evaluate", "--template", path, "--ids-file", "-"], stdin: "a\nb\n")
        #expect(result.status == 0)
        #expect(result.stdout == "a\tfalse\nb\tfalse\n")
        #expect(result.stderr == "rollout: note: 'device.os == 'ios'' is not known for this device; taken as false\n")
    }

    /// The streaming reader: chunk boundaries, a line longer than the 1 MiB read buffer, CRLF, empty lines and a
    /// last line without a newline give exactly what the per-id rule gives (the vector ids, repeated past 1 MiB).
    @Test func streamsAnyInputShapeLikeThePerIdRule() throws {
        let tsv = try String(contentsOf: TestSupport.vector("remote-config/rollout-2026-10pct.tsv"), encoding: .utf8)
        let rows = tsv.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t") }
        let value = Dictionary(rows.map { (String($0[0]), String($0[1])) }, uniquingKeysWith: { a, _ in a })
        var ids: [String] = []
        for round in 0..<12 { ids += rows.map { String($0[0]) } + (round % 3 == 0 ? [""] : []) }
        let long = String(repeating: "x", count: 1_500_000)
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let template = try TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json").path
        // Every other line ends in CRLF; the long id sits in the middle; the input ends without a newline.
        var input = ""
        for (k, id) in ids.enumerated() {
            input += id + (k % 2 == 0 ? "\r\n" : "\n")
            if k == ids.count / 2 { input += long + "\n" }
        }
        input += "inst-7"
        let path = dir.appendingPathComponent("ids.txt").path
        try input.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try TestSupport.run(try TestSupport.rolloutBinary(), ["evaluate", "--template", template, "--ids-file", path])
        #expect(result.status == 0, "\(result.stderr)")
        // The long id's value from the other (per-id, JSON) code path.
        let single = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["evaluate", "--template", template, "--ids-file", "-", "--format", "json"], stdin: long + "\n")
        let longValue = single.stdout.contains(#""value":"true""#) ? "true" : "false"
        var expected = ""
        for (k, id) in ids.enumerated() {
            expected += "\(id)\t\(value[id] ?? "false")\n"
            if k == ids.count / 2 { expected += long + "\t\(longValue)\n" }
        }
        expected += "inst-7\t\(value["inst-7"]!)\n"
        #expect(result.stdout.utf8.count == expected.utf8.count)
        #expect(result.stdout == expected)
    }

    @Test func aLineThatIsNotUTF8IsNamedByNumber() throws {
        let template = try TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json").path
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("ids.txt").path
        try #require(FileManager.default.createFile(atPath: path, contents: Data("inst-1\ninst-2\n".utf8) + Data([0x66, 0xC3, 0x28, 0x0A])))
        let result = try TestSupport.run(try TestSupport.rolloutBinary(), ["evaluate", "--template", template, "--ids-file", path])
        #expect(result.status == 1)
        #expect(result.stderr == "rollout: \(path): line 3: ids must be UTF-8 text\n")
    }

    @Test(arguments: [
        (["evaluate", "--ids-file", "-"], 2, "--template FILE is required"),
        (["evaluate", "--template", "/nonexistent.json", "--ids-file", "-"], 1, "cannot read the template /nonexistent.json"),
        (["evaluate", "--bogus"], 2, "unknown option '--bogus'"),
        (["evaluate", "--template", "x", "--ids-file", "y", "--format", "xml"], 2, "--format must be tsv or json"),
    ])
    func badInputIsOneLineAndNonZero(arguments: [String], status: Int32, message: String) throws {
        let result = try TestSupport.run(try TestSupport.rolloutBinary(), arguments, stdin: "")
        #expect(result.status == status)
        #expect(result.stderr.hasPrefix("rollout: ") && result.stderr.contains(message))
        #expect(result.stderr.split(separator: "\n").count == 1)
    }
}
