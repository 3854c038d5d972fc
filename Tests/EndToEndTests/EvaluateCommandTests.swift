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
