import CommandLineKit
import Console
import RolloutApp
import Glibc
import Platform
import JSON
import RemoteConfig
import Rollout
import Timekeeping

/// The operator commands over the config store: create it, read it, change the rollout, move templates in and
/// out, and check the audit log.
///
/// Every change goes through `WritePath` (built by `Wiring`), so read-only mode, policies, compare-and-swap
/// and the audit record are the same here as in the console.
enum StoreCommands {
    static let all: [Command] = [
        initCommand, status, set, nudge, killCommand, resume, history, rollback, diff, config, audit,
    ]

    // MARK: Options

    static let json = Option.flag("--json", help: "Print JSON instead of text.")

    static let writeOptions: [Option] = [
        .value(
            "--reason", name: "TEXT",
            help: "Why: the version's description and the audit record's reason (one line, up to 1024 characters)."),
        .flag(
            "--force",
            help: "Publish without compare-and-swap, overwriting whatever was published meanwhile (audited as forced)."),
        .flag(
            "--dry-run",
            help: "Show the change, its diff and the policy reports; write nothing (exit 4 if a policy would refuse)."),
        .value("--code", name: "CODE", help: "A fresh one-time code from your authenticator, when step-up policy asks for one."),
        .flag(
            "--security-key",
            help: "Approve with your security key instead of a code, when step-up asks: the key signs this exact change "
                + "(store, base version, percentage, reason; valid 2 minutes). Key: $ROLLOUT_SECURITY_KEY or the first connected."),
        .flag(
            "--phone",
            help: "Approve with a code sent to your enrolled phone (SMS, then a voice call) instead, when step-up asks: "
                + "the terminal asks for the code without echoing it (otherwise one line of stdin). Vonage credentials: "
                + "$ROLLOUT_VONAGE_CREDENTIALS (a mode 0600 file)."),
        .flag(
            "--override-guardrail",
            help: "Publish although the guardrail refuses (HOLD/HALT or over the attestation budget); needs --reason; audited."),
    ]

    static let allowRolloutChange = Option.flag(
        "--allow-rollout-change",
        help: "Allow removing AppAttestEnabled, its conditions or the cohort parameter, a new seed or a changed value "
            + "type (refused otherwise); needs a step-up code while step-up is on.")

    // MARK: init

    static let initCommand = Command(
        "init",
        summary: "Create a new store holding the rollout's starting template (version 1).",
        discussion:
            "The template has AppAttestEnabled (default \"false\"), the exposed and control conditions at 0% on the "
            + "seed, and the AppAttestCohort parameter: present, not started. init is the only command that creates a "
            + "store (every other command refuses a missing, empty or foreign file); it refuses an existing file.",
        options: [
            .value(
                "--seed", name: "SEED",
                help: "The percent conditions' seed (letters, digits, '.', '_', '-'; default rollout-<random hex>)."),
            .value(
                "--form", name: "client|server",
                help: "Client template (expression strings, default) or server template (structured conditions)."),
        ],
        examples: [
            "rollout init",
            "rollout init --seed rollout-2026 --store ./team.db",
            "rollout init --form server",
        ],
        action: guarded { inv in
            let seed = try inv.value("--seed").map { try validSeed($0, inv) } ?? Wiring.newSeed()
            let form = try templateForm(inv.value("--form") ?? "client", inv)
            guard !inv.flag("--read-only") else { throw WritePath.Failure.readOnly(.requested) }
            let created = try Wiring.createStore(inv, seed: seed, form: form)
            if let key = created.createdKey {
                StandardStream.error.write(
                    "rollout: created the team store key \(key): it seals the store; give it to every operator (mode 0600)\n")
            }
            let current = try created.session.templates.current()
            print("created store \(created.session.label)")
            print("version \(current.info.number) (etag \(current.etag)), \(form.rawValue) template, seed \(seed)")
            print(rolloutLine(current.template))
            return .ok
        })

    // MARK: Changes

    static let set = Command(
        "set",
        summary: "Set the AppAttestEnabled percentage.",
        discussion:
            "PERCENT is 0 to 100 with up to 6 decimals (micro-percent). Raising it only adds installations to the "
            + "exposed group (the seed is fixed). Publishes with compare-and-swap; exit 3 when someone published first.",
        options: writeOptions + [
            .value(
                "--expect", name: "PERCENT",
                help: "Only if the rollout is currently at PERCENT (a guard against stale reads).")
        ],
        positionals: [Positional("PERCENT", help: "The new percentage, e.g. 25 or 12.5.")],
        examples: [
            "rollout set 25 --reason \"crash rate flat for 24h\"",
            "rollout set 12.5 --expect 10 --reason \"step 3 of the plan\"",
            "rollout set 50 --dry-run",
        ],
        action: guarded { inv in
            let target = try percentage(inv.positional(0)!, inv)
            let expected = try inv.value("--expect").map { try percentage($0, inv) }
            return try write(inv, .rollout(.set(target, expected: expected)))
        })

    static let nudge = Command(
        "nudge",
        summary: "Move the AppAttestEnabled percentage up or down by a step.",
        discussion:
            "DELTA is signed, up to 6 decimals. The result must stay within 0 and 100. With --retry a nudge that "
            + "loses a compare-and-swap race is re-applied on top of the winner (validated again), so concurrent nudges add up.",
        options: writeOptions + [
            .flag("--retry", help: "On a conflict, re-apply the nudge on top of the newer version.")
        ],
        positionals: [Positional("DELTA", help: "The change in points, e.g. +5 or -2.5.")],
        examples: [
            "rollout nudge +5 --reason \"no new crash clusters\"",
            "rollout nudge -2.5",
            "rollout nudge +0.1 --retry",
        ],
        action: guarded { inv in
            let text = inv.positional(0)!
            let delta: MicroPercent
            do {
                delta = try MicroPercent.parse(text, allowSign: true)
            } catch {
                throw inv.usageError("\(error)")
            }
            guard delta != .zero else { throw inv.usageError("a nudge of 0 changes nothing") }
            guard delta.value.magnitude <= MicroPercent.hundred.value.magnitude else {
                throw inv.usageError("invalid percentage '\(text)': a nudge moves at most 100 points")
            }
            return try write(inv, .rollout(.nudge(delta)), retry: inv.flag("--retry"))
        })

    static let killCommand = Command(
        "kill",
        summary: "Turn AppAttestEnabled off for everyone at once, keeping the percentage for resume.",
        discussion: "Sets the flag's conditional value to \"false\" (a 0% condition would still match percentile 0). "
            + "Reducing exposure is never held up by guardrails or step-up verification.",
        options: writeOptions,
        examples: ["rollout kill --reason \"attestation failures spiking\"", "rollout kill --dry-run"],
        action: guarded { inv in try write(inv, .rollout(.kill)) })

    static let resume = Command(
        "resume",
        summary: "Undo a kill: the rollout is back at its percentage.",
        options: writeOptions,
        examples: ["rollout resume --reason \"Apple outage over\""],
        action: guarded { inv in try write(inv, .rollout(.resume)) })

    static let rollback = Command(
        "rollback",
        summary: "Publish an earlier version's template again, as a new version.",
        discussion:
            "Like Firebase's rollback: history is kept; the new version's update type is ROLLBACK and it records "
            + "the source version. See 'rollout history' for the numbers.",
        options: writeOptions + [allowRolloutChange],
        positionals: [Positional("VERSION", help: "The version whose template to restore.")],
        examples: ["rollout rollback 41 --reason \"undo 42: wrong seed\"", "rollout rollback 3 --dry-run"],
        action: guarded { inv in
            try write(inv, .rollback(toVersion: try versionNumber(inv.positional(0)!, inv)))
        })

    // MARK: history / diff

    static let history = Command(
        "history",
        summary: "List versions, newest first: who, when, why, and the rollout at each.",
        options: [
            json,
            .value("--limit", name: "N", help: "How many versions (default 20)."),
            .value("--before", name: "VERSION", help: "Only versions older than VERSION (paging)."),
        ],
        examples: ["rollout history", "rollout history --limit 5 --json", "rollout history --before 100"],
        action: guarded { inv in
            let limit = try inv.value("--limit").map { try count($0, inv) } ?? 20
            let before = try inv.value("--before").map { try versionNumber($0, inv) }
            let session = try Wiring.session(inv)
            let config = session.templates
            let versions = try config.versions(limit: limit, before: before)
            let approvals = try StepUpMethods.approvalsByVersion(session)
            let rollouts = try versions.map { v -> String in
                let t = try config.version(v.number).template
                return (try? RolloutPlan.locate(in: t)).flatMap { $0 }.map(describe) ?? "no rollout"
            }
            if inv.flag("--json") {
                let items: [JSONValue] = zip(versions, rollouts).map { v, r in
                    var o = versionJSON(v).objectValue!
                    o["rollout"] = .string(r)
                    o["approvals"] = .array(
                        (approvals[v.number] ?? []).map {
                            ["approver": .string($0.approver), "method": .string($0.method.rawValue),
                             "proposer": $0.proposer.map(JSONValue.string) ?? .null]
                        })
                    return .object(o)
                }
                print(JSONValue.array(items).prettyText, terminator: "")
                return .ok
            }
            var table = [["VERSION", "TIME", "USER", "TYPE", "ROLLOUT", "APPROVED", "REASON"]]
            for (v, r) in zip(versions, rollouts) {
                let type =
                    v.updateType == .rollback
                    ? "ROLLBACK of \(v.rollbackSource.map(String.init) ?? "?")" : v.updateType.rawValue
                table.append([
                    String(v.number), v.updateTime.iso8601, printable(v.updateUser), type, r,
                    printable(ChangeApproval.text(approvals[v.number] ?? [], actor: v.updateUser)), printable(v.description),
                ])
            }
            printTable(table)
            return .ok
        })

    static let diff = Command(
        "diff",
        summary: "Show what changed between two versions, one change per line.",
        options: [json],
        positionals: [
            Positional("A", help: "The older version."),
            Positional("B", help: "The newer version (default: the current one).", optional: true),
        ],
        examples: ["rollout diff 41 42", "rollout diff 1", "rollout diff 3 7 --json"],
        action: guarded { inv in
            let a = try versionNumber(inv.positional(0)!, inv)
            let b = try inv.positional(1).map { try versionNumber($0, inv) }
            let config = try Wiring.session(inv).templates
            let old = try config.version(a)
            let new = try b.map { try config.version($0) } ?? config.current()
            let lines = TemplateDiff.lines(from: old.template, to: new.template)
            if inv.flag("--json") {
                let out: JSONValue = [
                    "from": .number(JSONNumber(old.info.number)), "to": .number(JSONNumber(new.info.number)),
                    "changes": .array(lines.map { .string($0) }),
                ]
                print(out.prettyText, terminator: "")
                return .ok
            }
            print("version \(old.info.number) → version \(new.info.number)")
            print(lines.isEmpty ? "  (no differences)" : lines.map { "  " + printable($0) }.joined(separator: "\n"))
            return .ok
        })

    // MARK: config import / export

    static let config = Command(
        "config",
        summary: "Export or import the whole template (Firebase template JSON, as the firebase CLI writes it).",
        examples: [
            "rollout config export > template.json", "rollout config import template.json --reason \"add parameter\"",
        ],
        subcommands: [export, importCommand])

    static let export = Command(
        "export",
        summary: "Print a version's template as Firebase template JSON (two-space indentation).",
        discussion:
            "The output carries the version and its etag; 'config import' of an edited export then publishes only if "
            + "the store is still at that version. --format converts between the client form (condition expressions) "
            + "and the server form (structured conditions, as server-side Remote Config uses).",
        options: [
            .value("--format", name: "client|server", help: "The template form (default: the form stored)."),
            .value("--version", name: "N", help: "Export version N (default: the current version)."),
            .value("--output", "-o", name: "FILE", help: "Write to FILE instead of standard output."),
        ],
        examples: [
            "rollout config export > template.json",
            "rollout config export --format server -o server-template.json",
            "rollout config export --version 12",
        ],
        action: guarded { inv in
            let form = try inv.value("--format").map { try templateForm($0, inv) }
            let number = try inv.value("--version").map { try versionNumber($0, inv) }
            let config = try Wiring.session(inv).templates
            var template = try number.map { try config.version($0) }?.template ?? config.current().template
            if let form { template = try template.converted(to: form) }
            if let output = inv.value("--output") {
                do throws(FileError) { try Files.writeAtomically(output, Array(template.prettyText.utf8)) } catch {
                    throw CommandError("cannot write \(output): \(error.reason)")
                }
            } else {
                print(template.prettyText, terminator: "")
            }
            return .ok
        })

    static let importCommand = Command(
        "import",
        summary: "Publish a whole template from a file (validated; unknown fields kept as they are).",
        discussion: "FILE is Firebase template JSON (client or server form; '-' reads standard input). It is validated "
            + "before anything is opened; a seed change while the rollout is running is refused. When FILE carries an "
            + "etag (as 'config export' writes it), the import applies only if the store is still at that version "
            + "(exit 3 otherwise; --force overrides).",
        options: writeOptions + [allowRolloutChange],
        positionals: [Positional("FILE", help: "The template JSON file, or - for standard input.")],
        examples: [
            "rollout config import template.json --reason \"add WelcomeMessage\"",
            "rollout config export | jq '.parameters.X.defaultValue.value = \"1\"' | rollout config import -",
            "rollout config import template.json --dry-run",
        ],
        action: guarded { inv in
            let file = inv.positional(0)!
            let template = try readTemplate(file)
            return try write(inv, .importTemplate(template), basedOn: inv.flag("--force") ? nil : template.etag)
        })

    // MARK: audit

    static let audit = Command(
        "audit",
        summary: "Show the audit log or verify its hash chain.",
        examples: ["rollout audit show --limit 50", "rollout audit verify"],
        subcommands: [auditShow, auditVerify])

    static let auditShow = Command(
        "show",
        summary: "List audit records, newest first: who, when, what, from → to, why, and the result.",
        options: [
            json,
            .value("--limit", name: "N", help: "How many records (default 20)."),
            .value("--before", name: "SEQ", help: "Only records older than SEQ (paging)."),
        ],
        examples: ["rollout audit show", "rollout audit show --json --limit 100"],
        action: guarded { inv in
            let limit = try inv.value("--limit").map { try count($0, inv) } ?? 20
            let before = try inv.value("--before").map { Int64(try count($0, inv)) }
            let session = try Wiring.session(inv)
            let records = try session.templates.auditRecords(limit: limit, before: before)
            let approvals = inv.flag("--json") ? [:] : try StepUpMethods.approvalsByVersion(session)
            if inv.flag("--json") {
                print(JSONValue.array(records.map(auditJSON)).prettyText, terminator: "")
                return .ok
            }
            for r in records {
                let e = r.entry
                var line = "#\(r.sequence)  \(e.time.iso8601)  \(printable(e.actor))  \(printable(e.action))"
                if !e.from.isEmpty || !e.to.isEmpty { line += "  \(printable(e.from)) → \(printable(e.to))" }
                line += "  \(e.result.rawValue)" + (e.version.map { " v\($0)" } ?? "")
                if !e.reason.isEmpty { line += "  \"\(printable(e.reason))\"" }
                let approval = StepUpMethods.approvalText(r, byVersion: approvals)
                if !approval.isEmpty { line += "  (\(printable(approval)))" }
                let detail = shownDetail(e.detail)
                if !detail.isEmpty { line += "  [\(printable(detail))]" }
                print(line)
            }
            if records.isEmpty { print("(no audit records)") }
            return .ok
        })

    static let auditVerify = Command(
        "verify",
        summary: "Check the audit hash chain, every version, the sealed tables and the witness.",
        discussion:
            "Exit 0 when intact; otherwise exit 1 naming the first broken record, version or table. Detects an edited, "
            + "deleted or reordered audit record (including the newest), a version whose template or metadata was "
            + "changed after publication, any direct change to the tables that decide a write (operators, enrolments, "
            + "step-up policy, guardrail settings, App Check configuration), a seal rewritten without the store key, "
            + "and a log rewritten consistently with its head (the witness file beside the store no longer matches). "
            + "Writes refuse to run on a store that fails this check. Note the printed witness line: comparing it with "
            + "a copy kept elsewhere also detects a replaced store and witness.",
        options: [json],
        examples: ["rollout audit verify", "rollout audit verify --json"],
        action: guarded { inv in
            let report: AuditVerification
            do {
                report = try Wiring.session(inv).verifyAudit()
            } catch let p as ConfigIntegrityProblem {
                throw CommandError("audit verify failed: \(p)")
            } catch let f as AuditVerificationFailure {
                throw CommandError("audit verify failed: \(f)")
            } catch let e as StoreError {
                throw CommandError("audit verify failed: \(e)")
            }
            let approvals = try StepUpMethods.recordedApprovals(try Wiring.session(inv))
            if let bad = approvals.first(where: { !$0.approval.outcome.isAccepted }) {
                throw CommandError(
                    "audit verify failed: record \(bad.sequence): the security-key approval by \(printable(bad.approval.operatorID)) "
                        + "does not verify: \(bad.approval.outcome.description)")
            }
            if inv.flag("--json") {
                var witness = JSONObject()
                witness["path"] = .string(report.witnessPath)
                witness["line"] = .string(report.witnessLine)
                if report.stateDigest == nil { witness["sequence"] = .number(JSONNumber(report.headSequence)) }
                var out = JSONObject()
                out["intact"] = true
                out["auditRecords"] = .number(JSONNumber(report.auditRecords))
                out["versions"] = .number(JSONNumber(report.versions))
                out["headSequence"] = .number(JSONNumber(report.headSequence))
                out["headHash"] = .string(report.headHash)
                out["sealedTables"] = .array(report.sealedTables.map { .string($0) })
                out["witness"] = .object(witness)
                if let digest = report.stateDigest { out["stateDigest"] = .string(digest) }
                if !approvals.isEmpty {
                    out["securityKeyApprovals"] = .array(
                        approvals.map { a in
                            var o = JSONObject()
                            o["record"] = .number(JSONNumber(a.sequence))
                            o["operator"] = .string(a.approval.operatorID)
                            o["change"] = .string(a.approval.document.summary)
                            o["document"] = .string(a.approval.document.text)
                            return .object(o)
                        })
                }
                print(JSONValue.object(out).prettyText, terminator: "")
            } else {
                print(
                    "audit log intact: \(report.auditRecords) records, \(report.versions) versions checked against their records"
                        + (report.databaseIntegrityChecked ? ", database integrity ok" : ""))
                print("sealed tables match the seal and \(report.sealKey): \(report.sealedTables.joined(separator: ", "))")
                print("head: record \(report.headSequence) \(report.headHash)")
                print("witness \(report.witnessPath): \(report.witnessLine)")
                print("keep a copy of the witness line elsewhere: a store whose log was rewritten no longer matches it")
                if !approvals.isEmpty {
                    print("security-key approvals verified again from their records: \(approvals.count)")
                    for a in approvals {
                        print(
                            "  record \(a.sequence): \(printable(a.approval.operatorID)) approved \(printable(a.approval.document.summary))"
                                + " (\(printable(a.approval.document.reason)))")
                    }
                }
            }
            return .ok
        })
}

// MARK: - Writing

extension StoreCommands {
    /// Runs one change through the write path and prints what happened (or, with `--dry-run`, what would).
    static func write(_ inv: Invocation, _ intent: WritePath.Intent, retry: Bool = false, basedOn etag: String? = nil)
        throws -> ExitCode
    {
        let reason = try self.reason(inv)
        let session = try Wiring.session(inv)
        let (path, operatorID, readOnly) = (try session.writePath(), session.operatorID, session.readOnly)
        var request = WritePath.Request(
            intent: intent, actor: operatorID, reason: reason, origin: Wiring.origin)
        request.force = inv.flag("--force")
        request.overrideGuardrail = inv.flag("--override-guardrail")
        request.stepUpCode = inv.value("--code")
        if request.overrideGuardrail, reason.isBlank {
            throw inv.usageError("--override-guardrail needs --reason \"why it is safe\"")
        }
        request.retryOnConflict = retry
        request.basedOnETag = etag
        request.allowRolloutChange = inv.flag("--allow-rollout-change")
        if inv.flag("--security-key"), !inv.flag("--dry-run"), !readOnly {
            let unapproved = request
            request = try OperatorCommands.withSecurityKeyPIN { pin in
                try StepUpMethods.approveWithSecurityKey(
                    unapproved, on: path, device: try StepUpMethods.securityKeyDevice(), pin: pin,
                    notice: complain)
            }
        }

        if inv.flag("--dry-run") {
            let preview = try path.preview(request)
            print("dry run: nothing written")
            printChange(preview.proposal)
            // Refused as the real run refuses it, before any policy: the same message and exit code.
            if let refusal = preview.missingReason { throw WritePath.Failure.refused(refusal) }
            var refused = false
            for report in preview.reports {
                let verdict: String
                switch report.decision {
                case .allow: verdict = "allow"
                case .refuse(let r):
                    verdict = "would refuse: \(r.reason)" + (r.suggestion.map { "; \($0)" } ?? "")
                    refused = true
                }
                print("policy \(report.policy): \(verdict)")
                for line in report.lines { print("  \(printable(line))") }
            }
            if preview.isNoChange {
                print("no change: version \(preview.base.info.number) already says so")
            } else {
                print(
                    "would publish version \(preview.base.info.number + 1) on top of version \(preview.base.info.number) (etag \(preview.base.etag))"
                        + (request.force ? ", forced" : ""))
            }
            if readOnly { print("note: this session is read-only; a real run would be refused") }
            return refused && !preview.proposal.onlyReducesExposure ? .refused : .ok
        }

        let outcome: WritePath.Outcome
        if inv.flag("--phone"), !readOnly {
            guard !inv.flag("--security-key"), request.stepUpCode == nil else {
                throw inv.usageError("--phone, --security-key and --code are alternatives: give one")
            }
            outcome = try StepUpMethods.publishWithPhone(
                request, on: path, client: try StepUpMethods.phoneClient(),
                readCode: { OperatorCommands.readSecret("Code sent to your phone (or 'call'): ") },
                notice: complain)
        } else {
            outcome = try path.execute(request)
        }
        let now: StoredTemplate
        switch outcome {
        case .published(let stored, let proposal, let attempts):
            printChange(proposal)
            var line =
                "published version \(stored.info.number) (etag \(stored.etag)) by \(printable(stored.info.updateUser))"
            if attempts > 1 { line += ", re-applied on top of newer versions (\(attempts) attempts)" }
            if request.force { line += "; forced: compare-and-swap skipped (audited)" }
            print(line)
            now = stored
        case .unchanged(let stored, let proposal):
            let state = proposal.after.map(describe) ?? "as requested"
            print("no change: version \(stored.info.number) is already \(state); nothing written")
            now = stored
        }
        if intent == .rollout(.kill) { try requireNobodyServed(now) }
        return .ok
    }

    /// A kill is for stopping the flag: one that leaves it `"true"` for some installations (its default value or
    /// another condition's value, as an edit in the Firebase Console can make) is published, since it narrows what
    /// is served, but has not done its job, and says so with exit 1 rather than 0.
    static func requireNobodyServed(_ stored: StoredTemplate) throws {
        guard let plan = try? RolloutPlan.locate(in: stored.template, names: .standard) else { return }
        let served = Exposure.of(plan.names.parameter, in: stored.template, seed: plan.seed)
        guard served.possible > .zero else { return }
        throw CommandError(
            "the rollout is killed (version \(stored.info.number)), but \(plan.names.parameter) is still \"true\" for "
                + "\(served) of installations: its default value or another condition's value serves it, not the rollout; "
                + "set those values to \"false\" in the template (rollout config export, then config import)")
    }

    static func printChange(_ proposal: Proposal) {
        print(printable(proposal.summary))
        for line in proposal.diff { print("  " + printable(line)) }
    }

    /// `--reason`: one printable line of at most 1024 characters (Firebase's description limit).
    static func reason(_ inv: Invocation) throws -> String {
        let reason = inv.value("--reason") ?? ""
        guard !reason.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw inv.usageError("--reason must be one line of printable text")
        }
        guard reason.count <= 1024 else { throw inv.usageError("--reason is \(reason.count) characters; at most 1024") }
        return reason
    }

    /// Reads and validates a template file before any store is opened; `-` is standard input.
    static func readTemplate(_ file: String) throws -> RemoteConfigTemplate {
        let limit = RemoteConfigTemplate.maximumBytes
        let data: [UInt8]
        if file == "-" {
            data = StandardStream.readInput(limit: limit)
        } else {
            guard let isDirectory = Files.isDirectory(file) else {
                throw CommandError("\(file): no such file")
            }
            guard !isDirectory else { throw CommandError("\(file) is a directory, not a template file") }
            guard let bytes = try? Files.read(file, limit: limit + 1) else {
                throw CommandError("\(file): cannot read it (permission denied?)")
            }
            data = bytes
        }
        guard data.count <= limit else { throw CommandError("\(file): larger than \(limit >> 20) MiB; not a template") }
        guard !data.isEmpty else { throw CommandError("\(file): empty; expected Firebase template JSON") }
        guard let text = String(validating: data, as: UTF8.self) else { throw CommandError("\(file): not UTF-8 text") }
        do {
            return try RemoteConfigTemplate(parsing: text)
        } catch {
            throw CommandError("\(file): invalid template: \(error)")
        }
    }
}

// MARK: - Parsing arguments

extension StoreCommands {
    /// A percentage from 0 to 100 with at most 6 decimals; anything else is a usage error (exit 2).
    static func percentage(_ text: String, _ inv: Invocation) throws -> MicroPercent {
        do { return try MicroPercent.parsePercentage(text) } catch { throw inv.usageError("\(error)") }
    }

    static func versionNumber(_ text: String, _ inv: Invocation) throws -> Int {
        guard let n = Int(text), n >= 1 else { throw inv.usageError("\(text.quotedExcerpt()) is not a version number (1, 2, ...)") }
        return n
    }

    static func count(_ text: String, _ inv: Invocation) throws -> Int {
        guard let n = Int(text), n >= 1 else { throw inv.usageError("'\(text)' is not a positive count") }
        return n
    }

    static func templateForm(_ text: String, _ inv: Invocation) throws -> RemoteConfigTemplate.Form {
        guard let form = RemoteConfigTemplate.Form(rawValue: text) else {
            throw inv.usageError("unknown template form '\(text)'; expected client or server")
        }
        return form
    }

    static func validSeed(_ text: String, _ inv: Invocation) throws -> String {
        let allowed = text.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
        }
        guard !text.isEmpty, text.count <= 100, allowed else {
            throw inv.usageError("invalid seed '\(printable(text))': use 1 to 100 letters, digits, '.', '_' or '-'")
        }
        return text
    }
}

// MARK: - Output

extension StoreCommands {
    /// `12.5%, rolling`, `25% (killed)`, `0% (not started)`.
    static func describe(_ plan: RolloutPlan) -> String {
        plan.state == .rolling ? "\(plan.percentage), rolling" : "\(plan.percentage) (\(plan.state.rawValue))"
    }

    static func rolloutLine(_ template: RemoteConfigTemplate) -> String {
        switch Result(catching: { try RolloutPlan.locate(in: template) }) {
        case .success(let plan?): "\(plan.names.parameter) \(describe(plan))"
        case .success(nil): "no rollout of \(RolloutNames.standard.parameter) in this template"
        case .failure(let e): "the rollout cannot be read: \(e)"
        }
    }

    static func versionJSON(_ v: VersionInfo) -> JSONValue {
        [
            "versionNumber": .number(JSONNumber(v.number)), "etag": .string(v.etag),
            "updateTime": .string(v.updateTime.iso8601),
            "updateUser": .string(v.updateUser), "updateOrigin": .string(v.updateOrigin),
            "updateType": .string(v.updateType.rawValue),
            "description": .string(v.description),
            "rollbackSource": v.rollbackSource.map { .number(JSONNumber($0)) } ?? .null,
        ]
    }

    static func planJSON(_ plan: RolloutPlan) -> JSONValue {
        [
            "parameter": .string(plan.names.parameter), "state": .string(plan.state.rawValue),
            "percentage": .string(plan.percentage.decimalText),
            "microPercent": .number(JSONNumber(plan.percentage.value)),
            "seed": .string(plan.seed), "condition": .string(plan.names.exposedCondition),
            "expression": .string(plan.conditionText),
            "exposedBand": plan.state == .rolling ? .string(plan.exposedBand.description) : .null,
            "controlBand": plan.state == .rolling && !plan.controlBand.isEmpty
                ? .string(plan.controlBand.description) : .null,
        ]
    }

    static func auditJSON(_ r: AuditRecord) -> JSONValue {
        let e = r.entry
        return [
            "sequence": .number(JSONNumber(r.sequence)), "time": .string(e.time.iso8601), "actor": .string(e.actor),
            "action": .string(e.action), "from": .string(e.from), "to": .string(e.to), "reason": .string(e.reason),
            "result": .string(e.result.rawValue), "version": e.version.map { .number(JSONNumber($0)) } ?? .null,
            "detail": .string(e.detail), "previousHash": .string(r.previousHash), "hash": .string(r.hash),
        ]
    }

    /// The detail without the version digest the store adds for `audit verify`.
    static func shownDetail(_ detail: String) -> String {
        guard let range = detail.range(ofText: "version sha256:") else { return detail }
        var kept = String(detail[..<range.lowerBound])
        while kept.hasSuffix(" ") || kept.hasSuffix(";") { kept.removeLast() }
        return kept
    }

    /// Text from the store or the user made safe for a terminal: `Sanitiser`, the one output sanitiser.
    static func printable(_ text: String) -> String { Sanitiser.escape(text) }

    /// Key and value rows; on a terminal a long value wraps between words under its own column.
    static func printRows(_ rows: [(String, String)]) {
        let width = rows.map(\.0.count).max() ?? 0
        let terminal = WrappedOutput.width
        for (k, v) in rows {
            if k.isEmpty && v.isEmpty {
                print("")
                continue
            }
            for line in WrappedOutput.lines(k.padded(to: width + 2) + v, indent: width + 2, width: terminal) { print(line) }
        }
    }

    static func printTable(_ rows: [[String]]) {
        guard let columns = rows.first?.count else { return }
        let widths = (0..<columns).map { c in rows.map { $0[c].count }.max() ?? 0 }
        for row in rows {
            let cells = row.enumerated().map { c, cell in
                c == columns - 1 ? cell : cell.padded(to: widths[c])
            }
            var line = cells.joined(separator: "  ")
            while line.hasSuffix(" ") { line.removeLast() }
            print(line)
        }
    }
}

// MARK: - Errors

extension StoreCommands {
    /// Wraps an action so that every error becomes one line and the exit code of PRODUCT.md.
    static func guarded(_ body: @escaping @Sendable (Invocation) throws -> ExitCode) -> Command.Action {
        { inv in
            do {
                return try body(inv)
            } catch {
                throw commandError(error)
            }
        }
    }

    static func commandError(_ error: any Error) -> CommandError {
        func oneLine(_ s: String) -> String { printable(s.replacing("\n", with: " ")) }
        switch error {
        case let e as CommandError: return CommandError(oneLine(e.message), exit: e.exitCode)
        case let f as WritePath.Failure:
            let refusal = WriteRefusal(f)
            return CommandError(oneLine(refusal.commandLineText), exit: ExitCode(refusal))
        case let refusal as WriteRefusal:
            return CommandError(oneLine(refusal.commandLineText), exit: ExitCode(refusal))
        case let c as PublishConflict:
            return CommandError(
                "publish conflict: the store is at version \(c.current.info.number) now", exit: .conflict)
        default:
            if let refusal = SessionRefusal(error) { return CommandError(oneLine(refusal.description), exit: .refused) }
            if let fault = StoreFault(error) {
                if fault.isBusy {
                    return CommandError("the store is busy: another process held its write lock too long; try again")
                }
                return CommandError("store error: \(oneLine(fault.description))")
            }
            return CommandError(oneLine("\(error)"))
        }
    }
}
