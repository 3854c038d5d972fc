import CommandLineKit
import Glibc
import JSON
import Platform
import RolloutApp
import Telemetry
import TelemetrySources
import Timekeeping

/// `rollout source add|list|remove|test` and `rollout follow`: telemetry pulled from where it lives.
enum SourceCommands {
    static let all: [Command] = [group, follow]

    static let group = Command(
        "source",
        summary: "Configure where telemetry is pulled from (BigQuery over the GA4 and Crashlytics exports).",
        discussion:
            "A source is kept in the store and changed through the audited settings path (a policy change while "
            + "step-up is enforced; refused with 4 on a read-only store). Each pull asks BigQuery for counts per "
            + "minute, cohort and kind (the aggregation runs in BigQuery, so what is pulled grows with minutes and "
            + "cohorts, not events), from the source's watermark less its overlap, and lands only what changed "
            + "since the last pull, through the same commit as 'rollout ingest'.",
        examples: [
            "rollout source add ga4 --bigquery my-project --analytics my-project.analytics_123456 --source-credentials sa.json",
            "rollout source list",
            "rollout source test ga4",
            "rollout follow --interval 60",
        ],
        subcommands: [add, list, remove, test])

    static let add = Command(
        "add",
        summary: "Add (or replace) a BigQuery source over the GA4 (and Crashlytics) exports, or a GA4 realtime source.",
        discussion:
            "With --bigquery and --analytics: counts per minute, cohort and kind from the exports, aggregated in "
            + "BigQuery. With --ga4-property and --quota-project: the Data API's realtime report (the last 30 "
            + "minutes by minute, event and the user-scoped dimension customUser:AppAttestCohort; sessions, "
            + "successes, failures without their class, crashes without fatality), its property quota shown and "
            + "respected. With --crashlytics-app and --quota-project: the Crashlytics API's crash events (v1alpha), "
            + "counted per minute, cohort and fatality. What a source lands is recorded under the events it reads, "
            + "not its name: a source added again over the same events goes on from that record, and a source over "
            + "events another source counts (the same export or property, a property's export and its realtime "
            + "report, a project's Crashlytics table and its apps' API) is refused with 2, nothing stored.",
        options: [
            .value("--bigquery", name: "PROJECT", help: "The Google Cloud project that runs (and pays for) the queries."),
            .value("--ga4-property", name: "ID", help: "A GA4 property's number: a realtime report source instead."),
            .value("--crashlytics-app", name: "APP_ID", help: "A Firebase app id: a Crashlytics API (events) source instead."),
            .value("--quota-project", name: "PROJECT", help: "With --ga4-property or --crashlytics-app: the project the calls count against."),
            .value("--analytics", name: "PROJECT.DATASET", help: "The GA4 export's dataset (analytics_<property id>)."),
            .value("--crashlytics", name: "PROJECT.DATASET.TABLE", help: "The Crashlytics realtime export's table."),
            .value("--location", name: "LOCATION", help: "The datasets' BigQuery location (US, EU, ...)."),
            .value("--source-credentials", name: "FILE", help: "A service-account key file (else $GOOGLE_APPLICATION_CREDENTIALS when pulling)."),
            .value("--source-token-command", name: "CMD", help: "A command printing an access token (scope bigquery)."),
            .value("--since", name: "TIME", help: "Count first events and crashes from this time (default: a day before now)."),
            .value("--overlap", name: "MINUTES", help: "Pull this far back again for late data (default 10)."),
            .value("--every", name: "SECONDS", help: "How often 'follow' pulls (default 60)."),
            .value(
                "--silent-after", name: "MINUTES",
                help: "HOLD (status, watch, plan run, follow, the console) when no pull succeeded for this long (default 10)."),
            OperatorCommands.codeOption,
        ],
        positionals: [Positional("NAME", help: "The source's name (a-z, 0-9, - and _).")],
        examples: ["rollout source add ga4 --bigquery my-project --analytics my-project.analytics_123456"],
        action: runAdd)

    static let list = Command(
        "list", summary: "List the sources with their watermark, last pull and data age.",
        options: [.flag("--json", help: "Print JSON.")], examples: ["rollout source list --json"], action: runList)

    static let remove = Command(
        "remove",
        summary:
            "Remove a source (what it landed stays counted, and its ledger stays: a source added again over the same events goes on from there).",
        options: [OperatorCommands.codeOption],
        positionals: [Positional("NAME", help: "The source.")], examples: ["rollout source remove ga4"], action: runRemove)

    static let test = Command(
        "test", summary: "Pull a source once without landing anything: rows, bytes and what BigQuery processed.",
        positionals: [Positional("NAME", help: "The source.")], examples: ["rollout source test ga4"], action: runTest)

    static let follow = Command(
        "follow",
        summary: "Pull the sources on their schedule and follow the verdict headless, as 'watch' does.",
        discussion:
            "Before the first look pulls every source, before each later one every source whose interval has passed (a failed pull is recorded and retried "
            + "at the next interval; 429 and 5xx answers are waited out as Retry-After says; a pull is given up after 2 "
            + "minutes). "
            + "When pulls are due the store is looked at first, as it is, so auto-kill never waits on the network; "
            + "SIGINT or SIGTERM abandons a pull in flight. Prints a line per pull "
            + "and the verdict line of 'watch'; a source with no successful pull for its --silent-after is HOLD "
            + "('source X silent since ...'), never OK, in every verdict of the store (status, watch, plan run, the "
            + "console). Exit code: the last verdict, 0 OK, 5 WATCH, 6 HOLD, 7 HALT; 1 when the store cannot be read, or its "
            + "file was removed or replaced while following.",
        options: [
            .value("--interval", name: "SECONDS", help: "Wall seconds between looks (default 2; 0.01 to 3600)."),
            .value("--looks", name: "N", help: "Stop after N looks."),
            .flag("--quiet", help: "Print only verdict changes, not each pull."),
        ],
        examples: ["rollout follow", "rollout follow --looks 1   # one pull of every source, one look"],
        action: runFollow)

    // MARK: Actions

    static func runAdd(_ invocation: Invocation) throws -> ExitCode {
        let name = invocation.positional(0) ?? ""
        let property = invocation.value("--ga4-property")
        let app = invocation.value("--crashlytics-app")
        let kind: SourceConfiguration.Kind = property != nil ? .analyticsRealtime : app != nil ? .crashlyticsAPI : .bigQuery
        guard let project = invocation.value(kind == .bigQuery ? "--bigquery" : "--quota-project") else {
            throw invocation.usageError(kind == .bigQuery ? "--bigquery PROJECT is required" : "--quota-project PROJECT is required")
        }
        let analytics = invocation.value("--analytics") ?? ""
        if kind == .bigQuery, analytics.isEmpty { throw invocation.usageError("--analytics PROJECT.DATASET is required") }
        let session = try Wiring.session(invocation)
        var credentials = SourceConfiguration.Credentials.applicationDefault
        if let file = invocation.value("--source-credentials") { credentials = .serviceAccountFile(absolute(file)) }
        if let command = invocation.value("--source-token-command") {
            guard case .applicationDefault = credentials else {
                throw invocation.usageError("--source-credentials and --source-token-command exclude each other")
            }
            credentials = .accessTokenCommand(command)
        }
        func number(_ option: String, _ range: ClosedRange<Int64>, _ fallback: Int64) throws -> Int64 {
            guard let text = invocation.value(option) else { return fallback }
            guard let v = Int64(text), range.contains(v) else {
                throw invocation.usageError("\(option) takes a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return v
        }
        var origin = session.clock.now() - .days(1)
        if let since = invocation.value("--since") {
            guard let t = ISO8601.parse(since) else { throw invocation.usageError("--since takes an ISO 8601 time, not '\(since)'") }
            origin = t
        }
        let overlap = try number("--overlap", 0...2880, 10)
        let every = try number("--every", 5...86_400, 60)
        let silentAfter = try number("--silent-after", 1...10_080, 10)
        let made = Result { () throws(SourceConfigurationError) -> SourceConfiguration in
            try SourceConfiguration(
                name: name, kind: kind, project: project, analytics: analytics, crashlytics: invocation.value("--crashlytics"),
                location: invocation.value("--location"), property: property, app: app, credentials: credentials, origin: origin,
                overlap: .minutes(overlap), every: .seconds(every), silentAfter: .minutes(silentAfter))
        }
        guard case .success(let configuration) = made else {
            if case .failure(let e) = made { throw invocation.usageError(e.description) }
            return .usage
        }
        let path = session.settingsWritePath()
        switch try OperatorCommands.settings(
            path, .source(.add(configuration)), actor: StoreLocation.operatorID(invocation), code: invocation.value("--code"))
        {
        case .unchanged: OperatorCommands.write("source \(name) is already so; nothing changed.\n")
        default:
            OperatorCommands.write(
                "source \(name): "
                    + (property.map { "GA4 realtime, property \($0)" } ?? app.map { "Crashlytics API, app \($0)" }
                        ?? "BigQuery \(project), \(analytics)") + "\n")
            // A ledger kept from an earlier source over the same events: this one goes on from there.
            if let watermark = try session.sources(environment: invocation.environment).state(configuration)?.watermark {
                OperatorCommands.write(
                    "source \(name) continues the ledger \(configuration.ledger.key) from its watermark \(watermark.iso8601) "
                        + "(what was landed from these events before stays counted once)\n")
            }
        }
        return .ok
    }

    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + "/" + path
    }

    static func runList(_ invocation: Invocation) throws -> ExitCode {
        let session = try Wiring.session(invocation)
        let sources = session.sources(environment: invocation.environment)
        let now = session.clock.now()
        var rows: [JSONValue] = []
        let configurations = try sources.configurations()
        for c in configurations {
            let s = try sources.state(c)
            var o = c.json.objectValue ?? JSONObject()
            o["ledger"] = .string(c.ledger.key)
            // Sources over the same events (configured before such an add was refused) share one ledger: their
            // pulls count the events once.
            let sharing = configurations.filter { $0.name != c.name && $0.ledger.key == c.ledger.key }.map(\.name)
            o["sharesLedgerWith"] = .array(sharing.map { .string($0) })
            o["watermark"] = s?.watermark.map { .string($0.iso8601) } ?? .null
            o["lastSuccess"] = s?.lastSuccess.map { .string($0.iso8601) } ?? .null
            o["lastError"] = s?.lastError.map { .string($0) } ?? .null
            o["silence"] = (s ?? .never).silence(source: c.name, now: now, silentAfter: c.silentAfter).map { .string($0) } ?? .null
            o["newestData"] = s?.newestData.map { .string($0.iso8601) } ?? .null
            let age = s?.dataAge(now: now)
            o["dataAgeSeconds"] = age.map { .number(JSONNumber($0.microseconds / 1_000_000)) } ?? .null
            o["dataAge"] = .string(c.kind.dataAgeText(age))
            rows.append(.object(o))
        }
        if invocation.flag("--json") {
            print(JSONWriter(style: .pretty).string(.array(rows)))
            return .ok
        }
        if rows.isEmpty { print("No sources ('rollout source add' adds one).") }
        for r in rows {
            let name = Sanitiser.escape(r["name"]?.stringValue ?? "")
            let analytics = r["property"]?.stringValue.map { "ga4-realtime property " + Sanitiser.escape($0) }
                ?? r["app"]?.stringValue.map { "crashlytics-api app " + Sanitiser.escape($0) }
                ?? "bigquery " + Sanitiser.escape(r["analytics"]?.stringValue ?? "")
            let watermark = r["watermark"]?.stringValue ?? "never pulled"
            let health = r["silence"]?.stringValue.map { "HOLD: " + Sanitiser.escape($0) } ?? "answering"
            let age = Sanitiser.escape(r["dataAge"]?.stringValue ?? "")
            let shared = (r["sharesLedgerWith"]?.arrayValue ?? []).compactMap(\.stringValue)
            let note = shared.isEmpty ? "" : "  reads what \(shared.map(Sanitiser.escape).joined(separator: ", ")) reads (counted once)"
            print("\(name)  \(analytics)  watermark \(watermark)  \(age)  \(health)\(note)")
        }
        return .ok
    }

    static func runRemove(_ invocation: Invocation) throws -> ExitCode {
        let name = invocation.positional(0) ?? ""
        let path = try Wiring.session(invocation).settingsWritePath()
        _ = try OperatorCommands.settings(
            path, .source(.remove(name: name)), actor: StoreLocation.operatorID(invocation), code: invocation.value("--code"))
        OperatorCommands.write("source \(name) removed\n")
        return .ok
    }

    static func runTest(_ invocation: Invocation) throws -> ExitCode {
        let name = invocation.positional(0) ?? ""
        let sources = try Wiring.session(invocation).sources(environment: invocation.environment)
        let report = try sources.pull(try sources.configuration(name), land: false)
        print(describe(report))
        if let e = report.error { throw CommandError(e.description) }
        return .ok
    }

    static func describe(_ r: SourcePullReport) -> String {
        let window = "\(r.window.from.iso8601) to \(r.window.through.iso8601)"
        let waits = r.waits.isEmpty ? "" : ", waited \(r.waits.map { "\($0.seconds) s" }.joinedText(", ")) as asked"
        if let e = r.error { return "source \(Sanitiser.escape(r.source)): \(window): failed: \(Sanitiser.escape(e.message))\(waits)" }
        let age = r.dataAge.map { ", newest data \(formatDuration($0)) old (\(r.kind.dataAgeName))" } ?? ", no data in the window"
        return "source \(Sanitiser.escape(r.source)): \(window): \(Sanitiser.escape(r.note)), \(r.bytes) bytes received, "
            + "\(r.changedKeys) counters changed (\(r.addedEvents) events)\(age)\(waits)"
    }

    static func formatDuration(_ d: Instant.Duration) -> String {
        let s = d.microseconds / 1_000_000
        return s < 120 ? "\(s) s" : "\(s / 60) min"
    }

    static func runFollow(_ invocation: Invocation) throws -> ExitCode {
        let (interval, looks) = try TelemetryCommands.loopOptions(invocation)
        let quiet = invocation.flag("--quiet")
        let session = try Wiring.session(invocation)
        let sources = session.sources(environment: invocation.environment)
        let loop = try session.headlessLoop()
        var lastLine = ""
        var lastLevel = VerdictLevel.hold
        _ = try loop.run(
            interval: interval, looks: looks,
            report: { look in
                // The verdict holds the sources' silences already (the assessment's rule); a session refused
                // the landing says so beside them.
                let verdict = look.status.assessment.verdict
                let silent = !look.status.assessment.context.sourceSilences.isEmpty
                let level = verdict.level
                let reason = verdict.reason + (silent && level == .hold ? sources.landingNote().map { "; " + $0 } ?? "" : "")
                lastLevel = level
                let line = "\(level.labelText): \(Sanitiser.escape(reason))"
                if line != lastLine { print("\(look.status.wallNow.iso8601)  \(line)") }
                if let killed = look.autoKill { print("\(look.status.wallNow.iso8601)  \(killed)") }
                lastLine = line
                fflush(nil)
            }, until: { _ in false },
            // The first look pulls every source; later looks those whose interval has passed.
            sources: sources, pullAllFirst: true,
            pulled: { r in
                if !quiet || r.error != nil { print(describe(r)) }
            })
        return AssessmentJSON.exitCode(lastLevel)
    }

    /// What `watch` and `plan run` say of a pull: only a failed one, on stderr, so that their output stays theirs.
    static func pullFailure(_ r: SourcePullReport) {
        if r.error != nil { StandardStream.error.write(describe(r) + "\n") }
    }
}
