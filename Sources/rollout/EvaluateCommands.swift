import CommandLineKit
import RolloutApp
import Glibc
import Platform
import JSON
import RemoteConfig

/// `rollout evaluate`: which value each given installation gets, exactly as Firebase assigns it.
enum EvaluateCommands {
    static let all: [Command] = [evaluate]

    static let evaluate = Command(
        "evaluate",
        summary: "Print the value a parameter takes for each installation id.",
        discussion: "Reads a Remote Config template (client or server form, as the firebase CLI or the REST API writes it) "
            + "and a file of installation ids (one UTF-8 id per line; '-' reads standard input), and prints each id's value in "
            + "input order. Percentiles are computed exactly as Firebase does (SHA-256 of seed.id, mod 10^8). Conditions "
            + "on device or app properties cannot be known here and count as false; a note on standard error says which.",
        options: [
            .value("--template", name: "FILE", help: "The template JSON file."),
            .value("--ids-file", name: "FILE", help: "Installation ids, one per line ('-' for standard input)."),
            .value("--param", name: "KEY", help: "The parameter to evaluate (default AppAttestEnabled)."),
            .value("--format", name: "tsv|json", help: "tsv: id<TAB>value per line (default); json: one object per line with the source."),
        ],
        examples: [
            "rollout evaluate --template template.json --ids-file test-devices.txt",
            "printf 'fid-of-my-phone\\n' | rollout evaluate --template template.json --ids-file -",
            "rollout config export > t.json && rollout evaluate --template t.json --ids-file ids.txt --format json",
        ],
        action: run)

    static func run(_ invocation: Invocation) throws -> ExitCode {
        guard let templatePath = invocation.value("--template") else { throw invocation.usageError("--template FILE is required") }
        guard let idsPath = invocation.value("--ids-file") else { throw invocation.usageError("--ids-file FILE is required") }
        let key = invocation.value("--param") ?? "AppAttestEnabled"
        let format = invocation.value("--format") ?? "tsv"
        guard format == "tsv" || format == "json" else { throw invocation.usageError("--format must be tsv or json, not '\(format)'") }

        let templateText = try readText(templatePath, what: "template")
        let template: RemoteConfigTemplate
        do {
            template = try RemoteConfigTemplate(parsing: templateText)
        } catch {
            throw CommandError("\(templatePath): \(error)")
        }
        guard template.parameter(key) != nil else {
            throw CommandError("\(templatePath) has no parameter '\(key)' (it has: \(template.parameterKeys.prefix(10).joined(separator: ", ")))")
        }
        let input: Int32
        if idsPath == "-" {
            input = 0
        } else {
            input = open(idsPath, O_RDONLY | O_CLOEXEC)
            guard input >= 0 else { throw CommandError("cannot read the ids file \(idsPath): no such file or not readable") }
        }
        defer { if input != 0 { close(input) } }
        var evaluation = BulkEvaluation(template: template, parameter: key, format: format == "json" ? .json : .tsv)
        do {
            try evaluation.run(input: input, output: 1)
        } catch {
            throw CommandError(idsPath == "-" ? "\(error)" : "\(idsPath): \(error)")
        }
        for note in evaluation.notes.sorted() { StandardStream.error.write("rollout: note: \(note)\n") }
        return .ok
    }

    static func readData(_ path: String, what: String) throws -> [UInt8] {
        if path == "-" { return StandardStream.readInput() }
        guard let bytes = try? Files.read(path) else {
            throw CommandError("cannot read the \(what) \(path): no such file or not readable")
        }
        return bytes
    }

    static func readText(_ path: String, what: String) throws -> String {
        let data = try readData(path, what: what)
        guard let text = String(validating: data, as: UTF8.self) else { throw CommandError("\(path): the \(what) is not UTF-8 text") }
        return text
    }
}
