import CommandLineKit
import Crypto
import RolloutApp
import Glibc
import Platform
import Rollout
import StepUp
import Telemetry
import Timekeeping

/// `rollout operator enroll|list|remove` and `rollout policy show|set`: step-up verification from the CLI.
///
/// Every change (enrolment, removal, policy and guardrail settings) is an intent of `SettingsWritePath`: judged
/// by the same step-up rules as rollout changes, applied and audited in one transaction. This file parses
/// arguments, reads codes and prints.
enum OperatorCommands {
    static let all: [Command] = [operatorGroup, policyGroup, approve]

    static let approve = Command(
        "approve",
        summary: "Approve another operator's two-person request with your security key; it then publishes once.",
        discussion: "With 'policy set two-person on', reaching 100% needs two operators: the first one's "
            + "--security-key approval is recorded as a request (its id is printed, valid 2 minutes); a second, "
            + "different enrolled operator approves the same change document here. Refused when the request expired, "
            + "when the rollout changed since (another base version), or when the requester approves their own. "
            + "The key is $ROLLOUT_SECURITY_KEY or the first connected. Under the same rule, App Check ENFORCED and "
            + "a policy change that weakens a guardrail or a step-up requirement are recorded as requests (valid 15 "
            + "minutes) that a second operator approves here with their own --code.",
        options: [
            .value(
                "--code", name: "CODE",
                help: "For a settings request (App Check ENFORCED, a policy relaxation): your own one-time code "
                    + "('-' reads stdin); a terminal prompts for it.")
        ],
        positionals: [Positional("REQUEST", help: "The request id the first operator was given (16 hex digits).")],
        examples: ["rollout approve 3f1c9a0b5e7d2c41 --operator ben@desk", "rollout approve 9d2e4f6a8b0c1d3e --code 123456"],
        action: { try runApprove($0) })

    static let codeOption = Option.value(
        "--code", name: "CODE",
        help: "The current code of the acting operator's authenticator ('-' reads it from stdin). Without it, a "
            + "terminal prompts for it.")

    // MARK: operator

    static let operatorGroup = Command(
        "operator", summary: "Enrol, list and remove the operators whose codes step-up verification accepts.",
        discussion: "Step-up verification asks for a one-time code (TOTP, RFC 6238) before risky rollout changes. "
            + "It is on as soon as one operator is enrolled; 'rollout policy show' lists what needs a code.",
        examples: [
            "rollout operator enroll --operator ana@laptop",
            "rollout operator list --json",
            "rollout operator remove bob@desk --operator ana@laptop --code 123456",
        ],
        subcommands: [enroll, list, remove])

    static let enroll = Command(
        "enroll", summary: "Enrol the acting operator: show a new secret as a QR code, confirm with one code.",
        discussion: "Scan the QR code (or type the otpauth:// URI or the setup key) into an authenticator app, then "
            + "type the 6-digit code it shows. The secret is shown this once and never again. In a terminal the "
            + "command asks for the code; otherwise it reads one line from stdin, and with no input leaves the "
            + "enrolment pending for an hour: finish it with --code. When other operators are enrolled, one of "
            + "them approves with --approver and --approver-code.",
        options: [
            .value(
                "--code", name: "CODE", help: "Confirm a pending enrolment with the code the new authenticator shows."),
            .value(
                "--approver", name: "ID",
                help: "An enrolled operator who approves this enrolment; under the two-person rule, give two "
                    + "(--approver A --approver-code CODE --approver B --approver-code CODE).", repeatable: true),
            .value(
                "--method", name: "METHOD",
                help: "totp (default: an authenticator app), phone (--phone NUMBER: codes by SMS or voice) or security-key: add a FIDO2 key (touch and PIN or "
                    + "biometric) to the acting operator, already enrolled, confirmed with their --code. The key is "
                    + "$ROLLOUT_SECURITY_KEY (a path from 'fido2-token -L') or the first connected; a PIN comes from "
                    + "$ROLLOUT_SECURITY_KEY_PIN."),
            .value(
                "--approver-code", name: "CODE", help: "The approver's current code ('-' reads it from stdin), in the order of --approver.",
                repeatable: true),
            .value(
                "--phone", name: "NUMBER",
                help: "With --method phone: the acting operator's phone number in E.164 form (+ and country code), "
                    + "stored sealed; protected changes then accept a code sent to it with --phone."),
            .value(
                "--qr", name: "STYLE",
                help: "How to draw the QR code: color (fixed black and white, any theme), dark-terminal, "
                    + "light-terminal, or none. Default: color on a terminal unless NO_COLOR is set, else dark-terminal."
            ),
        ],
        examples: [
            "rollout operator enroll                              # as $ROLLOUT_OPERATOR or user@host",
            "rollout operator enroll --operator bob@desk --approver ana@laptop --approver-code 123456",
            "rollout operator enroll --operator ci-bot < /dev/null > uri.txt; rollout operator enroll --operator ci-bot --code 123456",
            "rollout operator enroll --method security-key --code 123456",
        ],
        action: { try runEnroll($0) })

    static let list = Command(
        "list", summary: "List enrolled and pending operators (never their secrets).",
        options: [.flag("--json", help: "Print JSON.")],
        examples: ["rollout operator list", "rollout operator list --json"],
        action: { try runList($0) })

    static let remove = Command(
        "remove", summary: "Remove an operator's enrolment (a protected action: needs the acting operator's code).",
        discussion: "The acting operator (--operator) confirms with their own current code. Removing the last "
            + "enrolled operator turns step-up verification off. A pending enrolment is removed without a code.",
        options: [codeOption],
        positionals: [Positional("ID", help: "The operator to remove.")],
        examples: ["rollout operator remove bob@desk --operator ana@laptop --code 123456"],
        action: { try runRemove($0) })

    // MARK: policy

    static let policyGroup = Command(
        "policy", summary: "Show or change which rollout changes need a fresh one-time code.",
        examples: ["rollout policy show", "rollout policy set increase-over 20 --code 123456"],
        subcommands: [policyShow, policySet])

    static let policyShow = Command(
        "show", summary: "Show the step-up policy and whether step-up is enforced.",
        options: [.flag("--json", help: "Print JSON.")],
        examples: ["rollout policy show", "rollout policy show --json"],
        action: { try runPolicyShow($0) })

    static let policySet = Command(
        "set", summary: "Change one policy setting (a protected action while step-up is enforced).",
        discussion: "While step-up is enforced, the acting operator confirms with a code. The keys:\n"
            + StepUpPolicy.standard.settings.map { "- \($0.key): \($0.help)" }.joinedText("\n"),
        options: [codeOption],
        positionals: [
            Positional("KEY", help: "The setting, as 'rollout policy show' lists it."),
            Positional("VALUE", help: "Its new value."),
        ],
        examples: [
            "rollout policy set increase-over 20 --code 123456",
            "rollout policy set cross 25,50,75 --code 123456",
            "rollout policy set lockout-minutes 30 --code 123456",
        ],
        action: { try runPolicySet($0) })

    // MARK: Actions

    static func runEnroll(_ invocation: Invocation) throws -> ExitCode {
        let id = try operatorID(StoreLocation.operatorID(invocation), invocation)
        switch invocation.value("--method") ?? "totp" {
        case "totp": break
        case "security-key": return try enrolSecurityKey(id, invocation)
        case "phone": return try enrolPhone(id, invocation)
        case let other: throw invocation.usageError("--method takes totp, security-key or phone, not '\(other)'")
        }
        let style = try qrStyle(invocation)
        if invocation.value("--code") == nil, let created = try Wiring.teamStoreKeyForEnrolment(invocation) {
            StandardStream.error.write("rollout: created the team store key \(created): give it to every operator (mode 0600)\n")
        }
        let path = try settingsPath(invocation)
        let actor = id.rawValue
        if let code = invocation.value("--code") {
            return try confirm(id, code: try resolve(code), path: path)
        }
        let approvers = try invocation.allValues("--approver").map { try operatorID($0, invocation) }
        let givenCodes = invocation.allValues("--approver-code")
        guard approvers.count <= 2, givenCodes.count <= approvers.count else {
            throw invocation.usageError(
                approvers.count > 2 ? "at most two --approver" : "each --approver-code follows its --approver")
        }
        // Each approver's code in the order given; one not given is asked for (or read from stdin with '-').
        let approverCodes = try approvers.enumerated().map { i, who in
            try readCode(i < givenCodes.count ? givenCodes[i] : nil, prompt: "Code of \(who)'s authenticator: ")
        }
        let second = approvers.count == 2
            ? SettingsWritePath.SecondApproval(approver: approvers[1], code: approverCodes[1] ?? "") : nil
        let started = try settings(
            path, .startEnrolment(id, approver: approvers.first, secondApprover: second), actor: actor,
            code: approverCodes.first ?? nil, codeOption: "--approver-code")
        guard case .enrolmentStarted(let pending) = started else { return .failure }
        let uri = pending.uri()
        // The QR code comes last, right above the prompt, so that it stays on screen while it is scanned.
        var out = "Enrolling \(id) for step-up verification (TOTP: SHA-1, 6 digits, 30 s).\n"
        out += "URI: \(uri.absoluteString)\n"
        out += "Setup key: \(grouped(pending.secret.base32))\n"
        out += "The secret is shown only this once."
        if let style {
            let matrix = try QRCodeMatrix(encoding: uri.absoluteString)
            out += " Scan the QR code with an authenticator app:\n"
            out += TerminalQR.render(matrix, style: style, quietZone: quietZone(for: matrix))
        } else {
            out += "\n"
        }
        write(out)

        if isatty(STDIN_FILENO) == 1 {
            while true {
                guard let code = prompt("Code from the authenticator (empty: later): "), !code.isEmpty else {
                    write(pendingNote(id))
                    return .ok
                }
                switch try confirmStep(id, code: code, path: path) {
                case .done: return .ok
                case .again(let message): StandardStream.error.write("\(message)\n")
                }
            }
        }
        guard let line = readLine(strippingNewline: true)?.trimmingSpaces(), !line.isEmpty else {
            StandardStream.error.write(pendingNote(id))
            return .ok
        }
        return try confirm(id, code: line, path: path)
    }

    /// The outcome of one confirmation code during interactive enrolment.
    enum ConfirmStep {
        case done
        case again(message: String)
    }

    static func confirm(_ id: OperatorID, code: String?, path: SettingsWritePath) throws -> ExitCode {
        switch try confirmStep(id, code: code, path: path) {
        case .done: return .ok
        case .again(let message): throw CommandError(message + "; try again with --code", exit: .refused)
        }
    }

    /// One confirmation code through the settings write path (checked, stored and audited in one transaction).
    static func confirmStep(_ id: OperatorID, code: String?, path: SettingsWritePath) throws -> ConfirmStep {
        switch try settings(path, .confirmEnrolment(id), actor: id.rawValue, code: code) {
        case .enrolled(let approvedBy):
            let approval = approvedBy.map { " (approved by \($0))" } ?? ""
            write(
                "Enrolled \(id)\(approval). Step-up verification is on; 'rollout policy show' lists what needs a code.\n"
            )
            return .done
        case .confirmationRefused(let next, let outcome):
            let left = Enrolment.attempts - next.failedAttempts
            return .again(message: "\(explain(outcome)) for \(id)'s new authenticator (\(left) attempts left)")
        default:
            return .done
        }
    }

    static func runList(_ invocation: Invocation) throws -> ExitCode {
        let (operators, pending) = try settingsPath(invocation).read { try ($0.operatorStandings(), $0.pendingStandings()) }
        let now = SystemClock().now()
        if invocation.flag("--json") {
            let json: [String: Any] = [
                "enforced": !operators.isEmpty,
                "operators": operators.map { r -> [String: Any] in
                    var o: [String: Any] = [
                        "id": r.id.rawValue, "enrolledAt": r.enrolledAt.iso8601, "failedAttempts": r.failedAttempts,
                        "state": r.isLockedOut(at: now) ? "locked-out" : "active",
                    ]
                    if let until = r.lockedUntil, r.isLockedOut(at: now) { o["lockedUntil"] = until.iso8601 }
                    if let step = r.lastAcceptedStep { o["lastCodeAt"] = TOTP.standard.start(ofStep: step).iso8601 }
                    return o
                },
                "pending": pending.map { p -> [String: Any] in
                    var o: [String: Any] = ["id": p.id.rawValue, "createdAt": p.createdAt.iso8601]
                    if let a = p.approvedBy { o["approvedBy"] = a.rawValue }
                    return o
                },
            ]
            write(try jsonText(json))
            return .ok
        }
        var rows = [["OPERATOR", "STATE", "ENROLLED", "LAST CODE", "WRONG CODES"]]
        for r in operators {
            let state = r.isLockedOut(at: now) ? "locked out until \(r.lockedUntil!.iso8601)" : "active"
            let last = r.lastAcceptedStep.map { TOTP.standard.start(ofStep: $0).iso8601 } ?? "-"
            rows.append([r.id.rawValue, state, r.enrolledAt.iso8601, last, String(r.failedAttempts)])
        }
        for p in pending {
            rows.append([p.id.rawValue, "pending (not confirmed)", "-", "-", String(p.failedAttempts)])
        }
        var out = table(rows)
        out +=
            operators.isEmpty
            ? "Step-up verification is off: no operator is enrolled ('rollout operator enroll').\n"
            : "Step-up verification is on (\(operators.count) enrolled).\n"
        write(out)
        return .ok
    }

    static func runRemove(_ invocation: Invocation) throws -> ExitCode {
        let target = try operatorID(invocation.positional(0) ?? "", invocation)
        let path = try settingsPath(invocation)
        let actor = StoreLocation.operatorID(invocation)
        // An enrolled operator or a pending enrolment: both are removed with a code while step-up is on.
        let needsCode = try path.read { try $0.isEnforced() && ($0.operatorRecord(target) != nil || $0.pendingEnrolment(target) != nil) }
        let code = needsCode ? try readCode(invocation.value("--code"), prompt: "Code of \(actor)'s authenticator: ") : nil
        switch try settings(path, .removeOperator(target), actor: actor, code: code) {
        case .removedPending:
            write("Removed the pending enrolment of \(target).\n")
        default:
            let off =
                try path.read { try $0.isEnforced() }
                ? "" : " Step-up verification is now off: no operator is enrolled."
            write("Removed \(target).\(off)\n")
        }
        return .ok
    }

    static func runPolicyShow(_ invocation: Invocation) throws -> ExitCode {
        let (policy, enrolled, guardrails) = try settingsPath(invocation).read {
            try ($0.stepUpPolicy(), $0.operatorStandings().count, $0.guardrailSettings())
        }
        if invocation.flag("--json") {
            let settings = Dictionary(uniqueKeysWithValues: policy.settings.map { ($0.key, $0.value) })
            let guardrailSettings = Dictionary(uniqueKeysWithValues: guardrails.settings.map { ($0.key, $0.value) })
            write(
                try jsonText([
                    "enforced": enrolled > 0, "enrolledOperators": enrolled, "settings": settings,
                    "guardrails": guardrailSettings,
                ]))
            return .ok
        }
        var out =
            enrolled > 0
            ? "Step-up verification is on (\(enrolled) operator\(enrolled == 1 ? "" : "s") enrolled).\n"
            : "Step-up verification is off until an operator enrols ('rollout operator enroll'); then:\n"
        out += table([["KEY", "VALUE", "MEANING"]] + policy.settings.map { [$0.key, $0.value, $0.help] })
        out += "Kill and decreases never need a code; removing an operator always does.\n"
        out += "\nGuardrails (HOLD/HALT refuse increases; kill and decreases always pass):\n"
        out += table(
            [["KEY", "VALUE", "MEANING"]]
                + guardrails.settings.map { [$0.key, $0.value, GuardrailSettings.meaning(of: $0.key, value: $0.value)] })
        write(out)
        return .ok
    }

    /// `policy set KEY VALUE`: a step-up policy key or a guardrail setting (`guardrails.*`, `budget.*`,
    /// `telemetry.*`), through the settings write path (judged by step-up, applied and audited in one transaction).
    static func runPolicySet(_ invocation: Invocation) throws -> ExitCode {
        let key = invocation.positional(0) ?? ""
        let value = invocation.positional(1) ?? ""
        let path = try settingsPath(invocation)
        let actor = StoreLocation.operatorID(invocation)
        // A code is read only when one will be asked for (a terminal prompt otherwise waits for nothing).
        let code = try path.read { db -> String? in
            guard try db.isEnforced() else { return nil }
            let change = StepUpChange(.policyChange, detail: key)
            guard !requiresStepUp(change, policy: try db.stepUpPolicy()).isEmpty else { return nil }
            return try readCode(invocation.value("--code"), prompt: "Code of \(actor)'s authenticator: ")
        }
        switch try settings(path, .setting(key: key, value: value), actor: actor, code: code) {
        case .unchanged(let shown): write("\(key) is already \(shown); nothing changed.\n")
        case .changed(_, let shown): write("\(key) = \(shown)\n")
        default: break
        }
        return .ok
    }

    /// `approve REQUEST`: the second operator's key over the request's change document; publishes or refuses.
    static func runApprove(_ invocation: Invocation) throws -> ExitCode {
        let id = invocation.positional(0) ?? ""
        guard id.count == 16, Hex.decode(id) != nil else {
            throw invocation.usageError("REQUEST is the 16 hex digits the first operator was given, not '\(id)'")
        }
        let session = try Wiring.session(invocation)
        let settingsRequest: TwoPersonSettingsRequest?
        do { settingsRequest = try TwoPersonSettingsRequest.find(id, in: session) } catch let broken as AuditChain.Break {
            throw CommandError(
                "request \(id) cannot be trusted: the audit log breaks at \(broken); nothing was changed ('rollout "
                    + "audit verify' shows the damage)", exit: .refused)
        }
        if let request = settingsRequest { return try approveSettings(request, session: session, invocation) }
        let outcome = try withSecurityKeyPIN { pin in
            try StepUpMethods.approveRequest(
                id, session: session, device: { try StepUpMethods.securityKeyDevice() }, pin: pin,
                notice: complain)
        }
        switch outcome {
        case .published(let stored, let proposal, _):
            print(proposal.summary)
            print("published version \(stored.info.number) (etag \(stored.etag)), approved by \(session.operatorID)")
        case .unchanged(let stored, _):
            print("no change: version \(stored.info.number) already says so; nothing written")
        }
        return .ok
    }

    /// `approve REQUEST` of a settings request: the approver's own code, then the change applied exactly as asked.
    static func approveSettings(_ request: TwoPersonSettingsRequest, session: RolloutSession, _ invocation: Invocation)
        throws -> ExitCode
    {
        let code = try readCode(invocation.value("--code"), prompt: "Code of \(session.operatorID)'s authenticator: ")
        switch request.intent {
        case .appCheck(.enforcementRequest(let service, _, let to, let reason)):
            do {
                switch try session.enforcement().set(service, to, reason: reason, code: code, dryRun: false, approving: request) {
                case .changed(let before, let after):
                    print(
                        "\(after.id): \(before.enforcementMode.rawValue) → \(after.enforcementMode.rawValue), requested by "
                            + "\(request.requester), approved by \(session.operatorID)")
                default:
                    throw CommandError("request \(request.id): \(service) is \(to.rawValue) already; nothing sent", exit: .refused)
                }
            } catch let r as EnforcementPath.Refusal {
                throw CommandError(r.description, exit: .refused)
            } catch let f as SettingsWritePath.Failure {
                throw CommandError("\(f)", exit: .refused)
            }
        default:
            let outcome = try settings(
                session.settingsWritePath(), request.intent, actor: session.operatorID, code: code, approving: request)
            guard case .changed = outcome else {
                throw CommandError(
                    "request \(request.id) is for '\(request.change)', which is no longer a change; nothing was changed",
                    exit: .refused)
            }
            print("\(request.change): requested by \(request.requester), approved by \(session.operatorID)")
        }
        return .ok
    }

    /// `operator enroll --method security-key`: the key makes a credential, the settings write path stores it.
    static func enrolSecurityKey(_ id: OperatorID, _ invocation: Invocation) throws -> ExitCode {
        let session = try Wiring.session(invocation)
        let code = try readCode(invocation.value("--code"), prompt: "Code of \(id)'s authenticator: ")
        do {
            _ = try withSecurityKeyPIN { pin in
                try StepUpMethods.enrolSecurityKey(
                    session: session, device: try StepUpMethods.securityKeyDevice(), pin: pin,
                    code: code, notice: complain)
            }
        } catch let f as SettingsWritePath.Failure {
            switch f {
            case .invalid(let m): throw CommandError(m, exit: .usage)
            case .unavailable(let m): throw CommandError(m)
            case .refused(_, let needsCode): throw CommandError("\(f)" + (needsCode ? " (--code CODE)" : ""), exit: .refused)
            }
        }
        print("enrolled a security key for \(id): protected changes accept it with --security-key")
        return .ok
    }

    /// `operator enroll --method phone --phone NUMBER`: the number, sealed, through the settings write path.
    static func enrolPhone(_ id: OperatorID, _ invocation: Invocation) throws -> ExitCode {
        guard let text = invocation.value("--phone") else {
            throw invocation.usageError("--method phone needs --phone +NUMBER (E.164: + and the country code)")
        }
        guard let number = PhoneNumber.normalized(text) else {
            throw invocation.usageError("--phone takes an E.164 number (+ then 7 to 15 digits), not '\(text)'")
        }
        let session = try Wiring.session(invocation)
        let code = try readCode(invocation.value("--code"), prompt: "Code of \(id)'s authenticator: ")
        let enrolment = PhoneEnrolment(operatorID: id, number: number, enrolledAt: session.clock.now())
        _ = try settings(session.settingsWritePath(), .enrolPhone(enrolment), actor: id.rawValue, code: code)
        print("enrolled phone \(enrolment.masked) for \(id): protected changes accept a code sent to it with --phone")
        return .ok
    }

    /// Runs `body` with the security key's PIN from `$ROLLOUT_SECURITY_KEY_PIN` (nil without it); when the key
    /// asks for a PIN (none given, or a wrong one) and stdin is a terminal, asks for it with echo off and runs
    /// `body` once more with it. The PIN goes to libfido2 only: never printed.
    static func withSecurityKeyPIN<T>(_ body: (String?) throws -> T) throws -> T {
        let fromEnvironment = StepUpMethods.securityKeyPIN()
        do {
            return try body(fromEnvironment)
        } catch where StepUpMethods.needsSecurityKeyPIN(error) && isatty(STDIN_FILENO) == 1 {
            guard let pin = readSecret("PIN of your security key: "), !pin.isEmpty else { throw error }
            return try body(pin)
        }
    }

    /// A secret line (a phone code): on a terminal, asked on stderr and read with echo off; otherwise one line of
    /// stdin. Never printed.
    ///
    /// Ctrl-C (or SIGTERM, SIGHUP) at the prompt ends the read as an empty line would: the terminal gets its echo
    /// back, the caller cancels what it started (a phone verification at the provider) and refuses the change,
    /// and the command then ends with 128 + the signal (`SecretPrompt.interruption`), as a stopped program does.
    static func readSecret(_ text: String) -> String? {
        guard isatty(STDIN_FILENO) == 1 else { return readLine(strippingNewline: true)?.trimmingSpaces() }
        // Echo off and the signals trapped before the prompt shows: nothing typed after it is echoed, and a
        // Ctrl-C pressed as soon as it shows is this prompt's.
        var saved = termios()
        let haveTerminal = tcgetattr(STDIN_FILENO, &saved) == 0
        if haveTerminal {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        }
        let previous = SecretPrompt.trapSignals()
        defer {
            SecretPrompt.restore(previous)
            if haveTerminal { _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved) }
            StandardStream.error.write("\n")
        }
        StandardStream.error.write(text)
        return SecretPrompt.readLine()?.trimmingSpaces()
    }

    /// The settings write path of the invocation's store, whichever backend.
    static func settingsPath(_ invocation: Invocation) throws -> SettingsWritePath {
        try Wiring.session(invocation).settingsWritePath()
    }

    /// Runs one settings intent; a refusal is exit 4 (with the option that supplies a code), a bad key or value
    /// a usage error.
    static func settings(
        _ path: SettingsWritePath, _ intent: SettingsWritePath.Intent, actor: String, code: String?,
        codeOption: String = "--code", approving: TwoPersonSettingsRequest? = nil
    ) throws -> SettingsWritePath.Outcome {
        do {
            return try path.execute(intent, actor: actor, code: code, approving: approving)
        } catch let f as SettingsWritePath.Failure {
            switch f {
            case .invalid(let m): throw CommandError(m, exit: .usage)
            case .unavailable(let m): throw CommandError(m)
            case .refused(_, let needsCode): throw CommandError("\(f)" + (needsCode ? " (\(codeOption) CODE)" : ""), exit: .refused)
            }
        }
    }

    // MARK: Wiring

    static func operatorID(_ text: String, _ invocation: Invocation) throws -> OperatorID {
        do {
            return try OperatorID(text)
        } catch {
            throw invocation.usageError(error.description)
        }
    }

    static func qrStyle(_ invocation: Invocation) throws -> TerminalQR.Style? {
        switch invocation.value("--qr") {
        case nil:
            let noColor = !(invocation.environment["NO_COLOR"] ?? "").isEmpty
            return isatty(STDOUT_FILENO) == 1 && !noColor ? .fixedColors : .lightOnDark
        case "none": return nil
        case let name?:
            guard let style = TerminalQR.Style(rawValue: name) else {
                throw invocation.usageError("--qr takes color, dark-terminal, light-terminal or none, not '\(name)'")
            }
            return style
        }
    }

    /// The standard quiet zone of 4 modules, or 2 when that keeps the whole code on a short terminal's screen
    /// (an enrolment URI for an id of up to 22 characters is a 41-module symbol: 25 lines with 4, 23 with 2, and
    /// a 24-line terminal is common).
    static func quietZone(for matrix: QRCodeMatrix) -> Int {
        var size = winsize()
        guard isatty(STDOUT_FILENO) == 1, ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_row > 0 else {
            return TerminalQR.defaultQuietZone
        }
        let standard = (matrix.size + 2 * TerminalQR.defaultQuietZone + 1) / 2
        return Int(size.ws_row) > standard ? TerminalQR.defaultQuietZone : 2
    }

    /// A code from the option (`-` reads stdin), else from a prompt on a terminal, else none.
    static func readCode(_ option: String?, prompt text: String) throws -> String? {
        if let option { return try resolve(option) }
        return isatty(STDIN_FILENO) == 1 ? prompt(text) : nil
    }

    static func resolve(_ option: String) throws -> String {
        guard option == "-" else { return option }
        guard let line = readLine(strippingNewline: true) else {
            throw CommandError("expected a code on stdin", exit: .usage)
        }
        return line.trimmingSpaces()
    }

    /// Asks on stderr (stdout stays clean for the URI) and reads one line from the terminal.
    static func prompt(_ text: String) -> String? {
        StandardStream.error.write(text)
        return readLine(strippingNewline: true)?.trimmingSpaces()
    }

    static func explain(_ outcome: CodeOutcome) -> String {
        switch outcome {
        case .missing: "no code"
        case .malformed: "not a 6-digit code"
        case .expired: "a code from another time (check the phone's clock)"
        default: "wrong code"
        }
    }

    static func pendingNote(_ id: OperatorID) -> String {
        "Enrolment of \(id) is pending: confirm within an hour with 'rollout operator enroll --operator \(id) --code CODE'.\n"
    }

    /// `ABCD EFGH ...`: groups of four, as authenticator apps show setup keys.
    static func grouped(_ key: String) -> String {
        stride(from: 0, to: key.count, by: 4).map { i in
            let start = key.index(key.startIndex, offsetBy: i)
            return String(key[start..<key.index(start, offsetBy: min(4, key.count - i))])
        }.joined(separator: " ")
    }

    static func table(_ rows: [[String]]) -> String {
        let widths = (0..<(rows.first?.count ?? 0)).map { c in rows.map { $0[c].count }.max() ?? 0 }
        return rows.map { row in
            zip(row, widths).enumerated().map { i, cell in
                i == row.count - 1 ? cell.0 : cell.0.padded(to: cell.1)
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    static func jsonText(_ object: Any) throws -> String {
        AnyJSON.pretty(object, escapingSlashes: false) + "\n"
    }

    static func write(_ text: String) {
        StandardStream.output.write(text)
    }
}

/// The signals that end a secret prompt: while it reads, SIGINT, SIGTERM and SIGHUP only record themselves and
/// interrupt the read (no `SA_RESTART`), so the prompt's clean-up runs on this thread.
enum SecretPrompt {
    static let signals: [Int32] = [SIGINT, SIGTERM, SIGHUP]
    /// The signal that interrupted a prompt, 0 when none did. Written by the handler (a plain word store).
    nonisolated(unsafe) static var interruption: Int32 = 0

    /// Installs the recording handler, and unblocks the signals on this thread (a parent may hand down a mask that
    /// blocks them); returns what to put back.
    static func trapSignals() -> (actions: [sigaction], mask: sigset_t) {
        _ = interruption  // initialised here, never first in the handler
        var action = sigaction()
        action.__sigaction_handler = unsafeBitCast(secretPromptHandler, to: sigaction.__Unnamed_union___sigaction_handler.self)
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        let actions = signals.map { sig in
            var old = sigaction()
            sigaction(sig, &action, &old)
            return old
        }
        var set = sigset_t()
        var mask = sigset_t()
        sigemptyset(&set)
        for sig in signals { sigaddset(&set, sig) }
        pthread_sigmask(SIG_UNBLOCK, &set, &mask)
        return (actions, mask)
    }

    static func restore(_ previous: (actions: [sigaction], mask: sigset_t)) {
        var mask = previous.mask
        pthread_sigmask(SIG_SETMASK, &mask, nil)
        for (sig, old) in zip(signals, previous.actions) {
            var old = old
            sigaction(sig, &old, nil)
        }
    }

    /// One line of standard input, nil at its end or once a signal was recorded. The descriptor is polled a tenth
    /// of a second at a time, so a signal taken by any thread of the process ends the wait.
    static func readLine() -> String? {
        var bytes: [UInt8] = []
        while interruption == 0 {
            var p = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, 100)
            if ready < 0, errno != EINTR { return nil }
            guard ready > 0 else { continue }
            var byte: UInt8 = 0
            let n = read(STDIN_FILENO, &byte, 1)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if byte == 0x0A { return String(decoding: bytes, as: UTF8.self) }
            if bytes.count < 4096 { bytes.append(byte) }
        }
        return nil
    }
}

private let secretPromptHandler: @convention(c) (Int32) -> Void = { sig in SecretPrompt.interruption = sig }
