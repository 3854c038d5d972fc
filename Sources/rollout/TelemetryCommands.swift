import CommandLineKit
import Glibc
import Platform
import JSON
import Monitoring
import RemoteConfig
import RolloutApp
import Rollout
import Telemetry
import TelemetryIngest
import Timekeeping

/// `rollout ingest` and `rollout telemetry`: events in, and the dashboard figures out.
enum TelemetryCommands {
    static let all: [Command] = [ingest, telemetry, watch]

    static let ingest = Command(
        "ingest",
        summary: "Read telemetry events from a file or stdin into the store.",
        discussion: "Formats: native (our NDJSON: one {\"t\",\"i\",\"k\",...} object per line), ga4 (Google Analytics "
            + "BigQuery export rows: AppAttestSuccess, AppAttestFailure, session_start, app_exception, AppAttestConfigFetch) "
            + "and crashlytics (Crashlytics BigQuery export rows, each a crash). The cohort comes from the event "
            + "parameter, user property or custom key AppAttestCohort. The input lands as one transaction: whole or "
            + "not at all, also if the process is killed. Bad lines are reported with their line number and skipped, "
            + "and the command then exits 1; with --strict the first bad line fails the whole batch. Rows of other "
            + "events or platforms are counted as ignored.",
        options: [
            .value("--format", name: "FORMAT", help: "native (default), ga4 or crashlytics."),
            .flag("--strict", help: "Fail the whole batch on the first bad line."),
            .value(
                "--batch-events", name: "N",
                help: "Commit after about N events (at a read boundary), for endless pipes."),
            .flag("--verbose", help: "Report each batch on stderr."),
            .flag("--quiet", help: "No progress line on stderr (it is shown only when stderr is a terminal)."),
            .flag("--json", help: "Print the summary as JSON."),
        ],
        positionals: [Positional("FILE", help: "The file to read; '-' or nothing for stdin.", optional: true)],
        examples: [
            "rollout ingest events.ndjson",
            "bq query --format=json ... | rollout ingest --format ga4 -",
            "rollout ingest --format crashlytics --strict crashes.ndjson --json",
        ],
        action: runIngest)

    static let telemetry = Command(
        "telemetry",
        summary: "Show the telemetry figures, statistics and verdict of the rollout.",
        discussion: "Totals since the rollout start, rates over the last 1, 5 and 15 minutes, the exposed vs control "
            + "crash comparison (SPRT, always-valid intervals, smallest detectable effect), failure CUSUMs, exposure and "
            + "propagation, and the verdict OK / WATCH / HOLD / HALT with its reasons. The percentage, its start and the "
            + "guardrail settings are read from the store: this is the same assessment as 'rollout status', the "
            + "console and the guardrail policy. --since and --percent ask what-if questions: the output is then "
            + "labelled HYPOTHETICAL and is not what the guardrail judges. " + GuardrailSettings.staleDefinition + ".",
        options: [
            .value("--since", name: "TIME", help: "What if the rollout had started at TIME (ISO 8601)? Hypothetical."),
            .value("--percent", name: "P", help: "What if the exposed percentage were P? Hypothetical."),
            .flag("--json", help: "Print as JSON."),
        ],
        examples: [
            "rollout telemetry", "rollout telemetry --json | jq .assessment.level",
            "rollout telemetry --percent 10 --since 2026-05-20T09:00:00Z   # hypothetical",
        ],
        action: runTelemetry)

    // MARK: ingest

    static func runIngest(_ invocation: Invocation) throws -> ExitCode {
        let formatName = invocation.value("--format") ?? "native"
        guard let format = TelemetryFormat(rawValue: formatName) else {
            throw invocation.usageError("unknown format '\(formatName)': expected native, ga4 or crashlytics")
        }
        var batchEvents = Int.max
        if let text = invocation.value("--batch-events") {
            guard let n = Int(text), n > 0 else {
                throw invocation.usageError("--batch-events needs a positive number")
            }
            batchEvents = n
        }
        let strict = invocation.flag("--strict")
        let verbose = invocation.flag("--verbose")
        let path = invocation.positional(0) ?? "-"
        let fd: Int32
        if path == "-" {
            fd = 0
        } else {
            fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw CommandError("cannot read \(path): \(String(cString: strerror(errno)))") }
        }
        var descriptorOwned = true  // until the reader below takes it
        defer { if descriptorOwned, fd != 0 { close(fd) } }
        // Progress on a terminal: bytes read of the file's size (of nothing known for a pipe).
        var info = stat()
        let size: Int64? = fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? Int64(info.st_size) : nil
        let progress = ProgressReporter.standardError(
            label: "ingest", unit: .bytes, total: size, quiet: invocation.flag("--quiet"))
        defer { progress.finish() }
        var bytesRead: Int64 = 0

        // The store facade creates a new store with mode 0600 and its first version, like every other command.
        let target = try Wiring.telemetryTarget(invocation)
        let tables = target.counters
        let clock = target.clock
        let ingest = TelemetryIngest(format: format, window: EventTimeWindow(now: clock.now(), rolloutStart: try target.monitor.status().startedAt), duplicateKeys: strict ? .reject : .count, concurrentRecording: true)
        var summary = IngestSummary()
        let source = "\(format.rawValue):\(path == "-" ? "stdin" : path)"

        func land() throws {
            ingest.drain()  // every line read is in the batch (native lines are recorded on a second thread)
            if strict, ingest.problemCount > 0 {
                throw CommandError(
                    "\(ingest.problems[0]); --strict: the batch of \(ingest.batch.eventCount) events was not ingested "
                        + "(\(summary.events) events landed in earlier batches)")
            }
            if verbose {
                progress.note(
                    "rollout: read \(ingest.lines) lines; writing a batch of \(ingest.batch.eventCount) events")
            }
            do {
                if try tables.commit(ingest.batch, source: source, at: clock.now()) != nil { summary.batches += 1 }
            } catch let error where SessionRefusal(error) != nil {  // read-only or a viewer: exit 4 on every backend
                throw error
            } catch {
                throw CommandError("the batch was not ingested: \(error)")
            }
            summary.absorb(ingest)  // after the commit: its merge of spilled installations counted them
            ingest.batch.removeAll()
            ingest.resetCounts()
        }

        // The input is read on a thread of its own, a few chunks ahead of the parse (and a file announced to the
        // kernel 32 MiB ahead); the reader closes the descriptor when it is done with it.
        let input = ReadAhead(fd: fd, size: size)
        descriptorOwned = false
        while true {
            let bytes: UnsafeRawBufferPointer
            do {
                guard let next = try input.next() else { break }
                bytes = next
            } catch {
                throw CommandError("reading \(path) failed: \(error); nothing of this batch was ingested")
            }
            ingest.feed(bytes)
            bytesRead += Int64(bytes.count)
            progress.update(done: bytesRead)
            if strict, ingest.problemCount > 0 { try land() }
            if ingest.batchEvents >= batchEvents { try land() }
        }
        ingest.finish()
        try land()
        summary.lines = ingest.lines
        progress.finish()

        if invocation.flag("--json") {
            print(try summary.json())
        } else {
            print(summary.text(source: path == "-" ? "stdin" : path))
        }
        // New telemetry can turn the verdict to HALT; with auto-kill on, that kills the rollout right here.
        if !target.readOnly, case .published(let stored, let proposal, _)? = try target.monitor.autoKillIfHalted(using: try target.writePath()) {
            StandardStream.error.write("rollout: auto-kill: \(proposal.summary) (version \(stored.info.number)): \(stored.info.description)\n")
        }
        return summary.badLines == 0 ? .ok : .failure
    }

    /// What `ingest` did, over all its batches.
    struct IngestSummary {
        var lines = 0
        var events = 0
        var installations = 0
        var batches = 0
        var ignored = 0
        var badLines = 0
        var problems: [IngestProblem] = []
        /// Lines read although a member was named twice (the last value counts; `--strict` refuses them).
        var duplicateKeyLines = 0
        var warnings: [IngestProblem] = []
        var byCohort: [Cohort: [String: Int64]] = [:]

        mutating func absorb(_ ingest: TelemetryIngest) {
            events += ingest.batch.eventCount
            installations += ingest.batch.installationCount
            ignored += ingest.ignored
            badLines += ingest.problemCount
            problems += ingest.problems.prefix(max(0, 100 - problems.count))
            duplicateKeyLines += ingest.warningCount
            warnings += ingest.warnings.prefix(max(0, 100 - warnings.count))
            for (key, n) in ingest.batch.eventTotals() {
                let name: String
                switch key.kind {
                case .crash: name = key.detail == 1 ? "fatalCrash" : "nonFatalCrash"
                default: name = key.kind.description
                }
                byCohort[key.cohort, default: [:]][name, default: 0] += n
            }
        }

        func text(source: String) -> String {
            var out =
                "ingested \(events) events from \(installations) installations (\(source), \(lines) lines, \(batches) batch\(batches == 1 ? "" : "es"))"
            for cohort in Cohort.allCases {
                guard let kinds = byCohort[cohort] else { continue }
                out +=
                    "\n  \(cohort): "
                    + kinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            }
            if ignored > 0 { out += "\n\(ignored) rows ignored (other events or platforms)" }
            if badLines > 0 {
                out += "\n\(badLines) bad line\(badLines == 1 ? "" : "s") skipped:"
                for p in problems { out += "\n  \(p)" }
                if badLines > problems.count { out += "\n  ... and \(badLines - problems.count) more" }
            }
            if duplicateKeyLines > 0 {
                out += "\n\(duplicateKeyLines) line\(duplicateKeyLines == 1 ? "" : "s") with a member named twice (read, the last value counts; --strict refuses them):"
                for w in warnings.prefix(10) { out += "\n  \(w)" }
                if duplicateKeyLines > min(10, warnings.count) { out += "\n  ... and \(duplicateKeyLines - min(10, warnings.count)) more" }
            }
            return out
        }

        func json() throws -> String {
            var cohorts: [String: Any] = [:]
            for (c, kinds) in byCohort { cohorts[c.rawValue] = kinds }
            let object: [String: Any] = [
                "lines": lines, "events": events, "installations": installations, "batches": batches,
                "ignored": ignored, "badLines": badLines, "duplicateKeyLines": duplicateKeyLines,
                "problems": problems.map { ["line": $0.line, "reason": $0.reason] as [String: Any] },
                "byCohort": cohorts,
            ]
            return AnyJSON.compact(object)
        }
    }

    // MARK: telemetry

    static func runTelemetry(_ invocation: Invocation) throws -> ExitCode {
        var hypothesis = RolloutMonitor.Hypothesis()
        if let p = invocation.value("--percent") {
            let exposed: RemoteConfig.MicroPercent
            do {
                // The same parser and range as every other percentage: an invalid one is a usage error (exit 2).
                exposed = try RemoteConfig.MicroPercent.parsePercentage(p)
            } catch {
                throw invocation.usageError("--percent: \(error)")
            }
            hypothesis.exposed = exposed
        }
        if let text = invocation.value("--since") {
            guard let t = ISO8601.parse(text) else {
                throw invocation.usageError("--since needs an ISO 8601 time, e.g. 2026-05-20T09:00:00Z")
            }
            hypothesis.since = t
        }
        let hypothetical = hypothesis != RolloutMonitor.Hypothesis()
        let monitor = try Wiring.monitor(invocation)
        let status = try monitor.status(hypothetical ? hypothesis : nil)
        let tables = monitor.telemetry
        if invocation.flag("--json") {
            var object = try TelemetryReport.json(status.snapshot, status.assessment, tables: tables)
            object["assessment"] = AssessmentJSON.value(status)
            object["hypothetical"] =
                hypothetical
                ? [
                    "since": TelemetryReport.orNull(hypothesis.since?.iso8601),
                    "percent": TelemetryReport.orNull(hypothesis.exposed?.decimalText),
                ] as [String: Any] : false
            print(AnyJSON.pretty(object))
        } else {
            if hypothetical {
                var what: [String] = []
                if let p = hypothesis.exposed { what.append("exposed \(p)") }
                if let since = hypothesis.since { what.append("rollout start \(since.iso8601)") }
                print("HYPOTHETICAL: \(what.joined(separator: ", ")) (a what-if; not the store's verdict)")
            }
            print(try TelemetryReport.text(status.snapshot, status.assessment, tables: tables))
            print(GuardrailReport.dataLine(status))
        }
        return .ok
    }
}

/// The telemetry figures as text and as JSON.
enum TelemetryReport {
    /// A JSON value or null.
    static func orNull(_ v: Any?) -> Any { AnyJSON.orNull(v) }

    static func json(_ s: TelemetrySnapshot, _ a: Assessment, tables: any TelemetryCounters) throws -> [String: Any] {
        var cohorts: [String: Any] = [:]
        for cohort in Cohort.allCases {
            let t = s.totals
            cohorts[cohort.rawValue] = [
                "successes": t.sum(.attestationSuccess, cohort: cohort),
                "failures": t.sum(.attestationFailure, cohort: cohort),
                "sessions": t.sum(.session, cohort: cohort), "fatalCrashes": t.sum(.crash, cohort: cohort, fatal: true),
                "nonFatalCrashes": t.sum(.crash, cohort: cohort, fatal: false),
                "fetches": t.sum(.configFetch, cohort: cohort),
                "users": t.sum(.usersEntered, cohort: cohort), "crashedUsers": t.sum(.usersCrashed, cohort: cohort),
            ]
        }
        var failures: [String: Int64] = [:]
        for (detail, n) in s.totals.failuresByDetail() { failures[try tables.describe(detail), default: 0] += n }
        let c = s.crash
        func interval(_ t: MixtureSPRT) -> Any {
            guard let i = t.interval else { return JSONValue.null }
            return ["estimate": t.estimate ?? 0, "lower": i.lowerBound, "upper": i.upperBound, "pValue": t.pValue]
        }
        return [
            "now": s.now.iso8601, "since": s.since.iso8601, "newestEvent": orNull(s.newestEvent?.iso8601),
            "dataAgeSeconds": orNull(s.dataAge.map { $0.seconds }),  // never negative
            "verdict": [
                "level": a.verdict.level.description, "reason": a.verdict.reason,
                "findings": a.verdict.findings.map(\.description),
            ],
            "armed": a.armed,
            "cohorts": cohorts,
            "failuresByClass": failures,
            "successRatio": orNull(s.totals.successRatio()),
            "perMinute": Dictionary(
                uniqueKeysWithValues: s.windows.map {
                    (
                        "last\($0.minutes)m",
                        ["successes": $0.perMinute(.attestationSuccess), "failures": $0.perMinute(.attestationFailure)]
                    )
                }),
            "crash": [
                "sprt": [
                    "logLikelihoodRatio": c.sprt.logLikelihoodRatio, "harmBound": c.sprt.harmBound,
                    "noHarmBound": c.sprt.noHarmBound,
                    "harmDeclared": c.sprt.harmDeclared, "exposedCrashes": c.sprt.exposedCrashes,
                    "controlCrashes": c.sprt.controlCrashes,
                ],
                "sessionCrashRateDifference": interval(c.sessionDifference),
                "userCrashRateDifference": interval(c.userDifference),
                "smallestDetectableIncrease": orNull(c.smallestDetectableIncrease),
            ],
            "exposure": [
                "observed": orNull(a.exposure.observedExposure), "desired": a.exposure.desiredExposure,
                "propagation": orNull(a.exposure.propagation),
                "newestTemplateVersion": orNull(a.exposure.newestTemplateVersion),
                "sampleRatioPValue": orNull(a.exposure.sampleRatio?.pValue),
            ],
            "activeInstallations": s.activity.active, "attestCapableInstallations": s.activity.attestCapable,
            "launchesPerInstallationPerDay": orNull(s.activity.launchesPerInstallationPerDay),
        ]
    }

    static func text(_ s: TelemetrySnapshot, _ a: Assessment, tables: any TelemetryCounters) throws -> String {
        var out: [String] = []
        // The reason and findings quote sources' own words (a failing source's error message): escaped, as
        // every face shows them.
        out.append("verdict \(a.verdict.level.labelText): \(Sanitiser.escape(a.verdict.reason))")
        out.append("guardrails \(a.armed ? "armed" : "not armed (no telemetry for this rollout yet)")")
        let age = s.dataAge.map { "\(Int64($0.seconds)) s" } ?? "no data"
        out.append("since \(s.since.iso8601); newest event \(s.newestEvent?.iso8601 ?? "none") (age \(age))")
        for cohort in [Cohort.enabled, .control, .none] {
            let t = s.totals
            let name = cohort.rawValue.padded(to: 8)
            let ok = t.sum(.attestationSuccess, cohort: cohort)
            let failed = t.sum(.attestationFailure, cohort: cohort)
            let sessions = t.sum(.session, cohort: cohort)
            let crashes = t.sum(.crash, cohort: cohort, fatal: true)
            let users = t.sum(.usersEntered, cohort: cohort)
            let crashed = t.sum(.usersCrashed, cohort: cohort)
            out.append(
                "  \(name) attestations \(ok) ok / \(failed) failed, sessions \(sessions), fatal crashes \(crashes), users \(users) (\(crashed) crashed)"
            )
        }
        let failures = try s.totals.failuresByDetail().sorted { $0.value > $1.value }.map {
            "\(Sanitiser.escape(try tables.describe($0.key))) \($0.value)"
        }
        if !failures.isEmpty { out.append("failures: " + failures.joined(separator: ", ")) }
        out.append(
            "per minute (1/5/15 min): "
                + s.windows.map {
                    cFormat(
                        "%.1f ok, %.1f failed", $0.perMinute(.attestationSuccess),
                        $0.perMinute(.attestationFailure))
                }
                .joined(separator: " | "))
        var exposure =
            "exposure: \(a.exposure.observedExposure.map { cFormat("%.1f%%", $0 * 100) } ?? "n/a") of "
            + "\(s.activity.active) active installations report enabled (desired \(cFormat("%.1f%%", a.exposure.desiredExposure * 100)))"
        if let v = a.exposure.newestTemplateVersion, let p = a.exposure.propagation {
            exposure += "; \(cFormat("%.1f%%", p * 100)) on template version \(v)"
        }
        out.append(exposure)
        for f in a.verdict.findings where f.text != a.verdict.reason { out.append("  " + Sanitiser.escape("\(f)")) }
        return out.joined(separator: "\n")
    }
}
