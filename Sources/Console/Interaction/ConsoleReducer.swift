import Platform
import RampPlans
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

extension ConsoleState {
    /// Applies one event and returns the effects the adapters must carry out.
    ///
    /// Pure: no I/O, no clock (time arrives as `.tick`). Answers to a request the operator has cancelled, or that
    /// belong to a dialog no longer open, change nothing.
    public mutating func handle(_ event: ConsoleEvent) -> [ConsoleEffect] {
        switch event {
        case .key(let key):
            guard ConsoleScreen.fits(screenSize) else { return handleKeyTooSmall(key) }
            return handleKey(key)
        case .click(let target):
            guard ConsoleScreen.fits(screenSize) else { return [] }
            return handleClick(target)
        case .wheel(let notches):
            guard ConsoleScreen.fits(screenSize) else { return [] }
            return handleWheel(notches)
        case .tick(let instant):
            now = instant
            // Messages are for people: they expire on wall time, also while ticks run on a simulation's time.
            let messageTime = wallNow ?? instant
            if var n = notice {
                if let shown = n.shownAt {
                    if let lifetime = n.lifetime, lifetime < messageTime - shown { notice = nil }
                } else {
                    n.shownAt = messageTime
                    notice = n
                }
            }
            return []
        case .wallClock(let instant):
            wall = instant
            return []
        case .resize(let size):
            screenSize = size
            clampScroll()
            return ConsoleScreen.fits(size) ? [] : closeUnseenDialogs()
        case .snapshot(let m):
            sourceProblem = nil
            let before = (frozen ? heldModel ?? model : model)?.header.templateVersion.flatMap { Int($0) }
            if frozen { heldModel = m } else { model = m }
            // An open history or audit view is read again when a newer version arrives, as the README promises.
            let head = m.header.templateVersion.flatMap { Int($0) }
            let reload = head.map { h in before.map { h > $0 } ?? false } == true ? reloadOpenList() : []
            // Someone else published after this console: `u` must not walk on past their change from an old trail.
            if let head, let mine = lastPublished, head > mine { undoTrail = [] }
            // The selected change stays selected as rows arrive; when it has left the log, the newest is.
            if let selected = logSelection, !logVersions.contains(selected) { logSelection = logVersions.first }
            if storeLost == nil, let lost = m.header.storeLost { return noteStoreLost(lost) + reload }
            guard storeLost == nil else { return reload }
            return noteVerdict(m) + reviseOpenDialog(m) + reload
        case .sourceFailed(let message):
            sourceProblem = message
            return []
        case .previewReady(var preview):
            if let revision, revision.request.id == preview.request.id {
                self.revision = nil
                switch overlay {
                case .confirm(let old, _), .reason(let old, _, _):
                    if case .reason(_, let field, _) = overlay, !field.text.trimmingSpaces.isEmpty {
                        keptReason = field.text
                    }
                    // Said as what happened: the store moved (who changed what), or only the verdict did.
                    if let first = old.supersedes ?? (old.baseVersion != preview.baseVersion ? old.baseVersion : nil) {
                        preview.supersedes = first
                        let seen = Set(old.movedBy.map(\.version))
                        preview.movedBy = old.movedBy + revision.intervening.filter { !seen.contains($0.version) }.reversed()
                    } else {
                        preview.rejudgedFrom = old.rejudgedFrom ?? old.guardrail.verdict
                    }
                    // Typing a reason goes on where it was, with the text as typed, when the re-judged change still
                    // asks for one; otherwise (now refused, or no longer an increase) the confirm dialog says why.
                    if case .reason(_, let field, _) = overlay, preview.requiresReason, !preview.guardrail.refuses {
                        overlay = .reason(preview, field: field, error: nil)
                        return []
                    }
                    overlay = .confirm(preview, focus: .cancel)
                default: break
                }
                return []
            }
            guard case .preparing(let request) = overlay, request.id == preview.request.id else { return [] }
            revisedFor = nil
            noteMovedSinceShown(&preview)
            // A kill only lowers exposure and never waits: its dialog focuses Kill, so the Enter that follows the
            // HALT footer's `K kill now` kills. Every other change focuses Cancel.
            overlay = .confirm(preview, focus: request.operation == .rollout(.kill) ? .act : .cancel)
            return []
        case .previewFailed(let id, let message):
            return previewAnswered(id, refusal: nil, message: message)
        case .writeRefused(let id, let refusal, _) where approvalOnScreen(id) != nil:
            let request = approvalOnScreen(id) ?? ""
            overlay = nil
            say("Request \(request) not approved: " + Self.publishText(refusal), Self.publishLevel(refusal))
            return [.refresh]
        case .writeRefused(let id, let refusal, let intervening):
            if revision?.request.id == id { return previewAnswered(id, refusal: refusal, message: refusal.description) }
            if case .preparing(let request) = overlay, request.id == id {
                return previewAnswered(id, refusal: refusal, message: refusal.description)
            }
            return publishRefused(id, refusal, intervening: intervening)
        case .published(let receipt) where approvalOnScreen(receipt.requestID) != nil:
            let request = approvalOnScreen(receipt.requestID) ?? ""
            overlay = nil
            say("Published v\(receipt.version): \(receipt.from.text) → \(receipt.to.text), request \(request) approved", .success)
            undoTrail = []
            lastPublished = Int(receipt.version)
            return [.refresh]
        case .published(let receipt):
            var rolledBackTo: Int?
            if let request = inFlight(receipt.requestID) {
                overlay = nil
                switch request.preview.request.operation {
                case .rollbackLast: rolledBackTo = Int(request.preview.baseVersion).map { $0 - 1 }
                case .rollback(let v): rolledBackTo = v
                default: break
                }
            }
            say("Published v\(receipt.version): \(receipt.from.text) → \(receipt.to.text)", .success)
            keptReason = nil
            lastPublished = Int(receipt.version)
            if let rolledBackTo {
                undoTrail.insert(rolledBackTo, at: 0)
            } else {
                undoTrail = []
            }
            return [.refresh]
        case .publishFailed(let id, let message) where approvalOnScreen(id) != nil:
            let request = approvalOnScreen(id) ?? ""
            overlay = nil
            say("Request \(request) not approved: " + message, .error)
            return [.refresh]
        case .publishFailed(let id, let message):
            if isPublishing(id) { overlay = nil }
            say("Not published: " + message, .error)
            return [.refresh]
        case .phoneStatus(let id, let status):
            guard case .phone(let request, _, let field, let error, let checking) = overlay, request.preview.request.id == id
            else { return [] }
            overlay = .phone(request, status: status, field: field, error: error, checking: checking)
            return []
        case .phoneEnded(let id):
            guard case .phone(let request, _, _, let error, _) = overlay, request.preview.request.id == id else { return [] }
            overlay = nil
            keptReason = nil
            say("Not published: the phone verification ended" + (error.map { ": " + $0 } ?? ""), .error)
            return [.refresh]
        case .securityKeyNeedsPIN(let id):
            guard let request = inFlight(id), request.securityKey else { return [] }
            overlay = .securityKeyPIN(
                request.preview, reason: request.reason, field: TextField(maxLength: 63, masked: true),
                error: request.securityKeyPIN == nil ? nil : "The key refused the PIN; type it again (Esc cancels).")
            return []
        case .historyLoaded(let entries):
            guard case .history(let old, let cursor) = overlay else { return [] }
            guard let old else {
                overlay = .history(entries: entries, cursor: ListCursor())
                return []
            }
            // Read again as the store moved: the selection stays on the same version, wherever its row now is.
            let was = filteredRows(overlay).map { old[$0].version }
            let next = Overlay.history(entries: entries, cursor: cursor)
            let now = filteredRows(next).map { entries[$0].version }
            overlay = .history(entries: entries, cursor: following(cursor, from: was, to: now))
            return []
        case .auditLoaded(let log):
            guard case .audit(let old, let cursor) = overlay else { return [] }
            guard let old else {
                overlay = .audit(log: log, cursor: ListCursor())
                return []
            }
            // As for the history: the selection follows its audit record (by sequence), not its row number.
            let was = filteredRows(overlay).map { old.entries[$0].sequence }
            let next = Overlay.audit(log: log, cursor: cursor)
            let now = filteredRows(next).map { log.entries[$0].sequence }
            overlay = .audit(log: log, cursor: following(cursor, from: was, to: now))
            return []
        case .versionLoaded(let detail):
            guard case .version(let number, nil, let scroll, let back) = overlay, number == detail.number else {
                return []
            }
            overlay = .version(number: number, detail: detail, scroll: scroll, back: back)
            return []
        case .planControlled(let message, let refused):
            say(message, refused ? .error : .info)
            return [.refresh]
        case .loadFailed(let message):
            switch overlay {
            case .history(nil, _), .audit(nil, _):
                overlay = nil
                say("Could not load: \(message)", .error)
            case .version(_, nil, _, let back):
                overlay = back
                say("Could not load: \(message)", .error)
            default: break
            }
            return []
        case .simulation(let status):
            simulation = status
            return []
        case .simulationChanged(let status, let command):
            simulation = status
            switch command {
            case .togglePause:
                say(
                    status.paused
                        ? "Simulation paused: its time stands still; p resumes" : "Simulation resumed at \(status.speed)",
                    .info)
            case .faster, .slower:
                say("Simulation speed \(status.speed)" + (status.paused ? " (paused; p resumes)" : ""), .info)
            }
            return []
        }
    }

    /// Escalation without flapping: the alert level (what the log, the bell and the flash follow) rises at once and
    /// falls only after the verdict has stayed lower for `holdDown` of wall time; a rise to HOLD or HALT rings the
    /// bell and flashes the header once; a new kind of reason (its topic) at the same level is logged and flashed
    /// once per episode. Each log line is stamped when it was seen; also while the display is frozen (an alarm must
    /// not wait for `f`).
    private mutating func noteVerdict(_ m: ConsoleModel) -> [ConsoleEffect] {
        let level = m.crash.verdict
        let topic = m.crash.findings.first { $0.level == level }?.topic
        lastVerdict = level
        // Stamped on the wall clock, like the changes beside it in the log (a demo's ticks run on simulated time).
        let stamp = wallNow ?? m.header.dataAsOf ?? Instant(microseconds: 0)
        let wall = stamp
        func log() {
            verdictLog.append(
                NotableEvent(
                    at: stamp, severity: level >= .hold ? .critical : level == .watch ? .warning : .info,
                    text: level.description + (topic.map { " " + $0.rawValue } ?? "") + ": " + (m.crash.reasons.first ?? ""),
                    level: level))
            if verdictLog.count > 100 { verdictLog.removeFirst(verdictLog.count - 100) }
        }
        func enter() {
            alertLevel = level
            alertTopics = topic.map { [$0] } ?? []
            fallingSince = nil
        }
        guard let logged = alertLevel else {
            // Opening the console is not a change: a level above OK is logged, nothing rings.
            enter()
            if level > .ok { log() }
            return []
        }
        if level > logged {
            enter()
            log()
            guard level >= .hold else { return [] }
            alertAt = wall
            return configuration.bell ? [.bell] : []
        }
        if level == logged {
            fallingSince = nil
            if let topic, !alertTopics.contains(topic) {
                alertTopics.insert(topic)
                log()
                if level >= .hold { alertAt = wall }
            }
            return []
        }
        // Lower: only once it has stayed lower for the hold-down.
        guard let since = fallingSince else {
            fallingSince = wall
            return []
        }
        if configuration.holdDown <= wall - since {
            enter()
            log()
        }
        return []
    }

    /// The store the console opened is gone: from now on the console is read-only. A change being prepared or
    /// confirmed is dropped (its publish would be refused; one already in flight gets the write path's answer) and
    /// its dialog replaced by a notice that takes the next Enter or Esc (an Enter meant for Publish opened the
    /// verdict pane over the banner); the operator is told once, in the log as well, with the bell.
    private mutating func noteStoreLost(_ lost: String) -> [ConsoleEffect] {
        storeLost = lost
        // A phone verification the provider started is cancelled there (as Esc does): its code can approve nothing
        // now, and the provider would go on to call the operator's phone.
        var effects: [ConsoleEffect] = []
        if case .phone(let request, .some, _, _, false) = overlay {
            effects.append(.phoneCancel(requestID: request.preview.request.id))
        }
        switch overlay {
        case .valuePrompt, .preparing, .confirm, .reason, .stepUp, .stepUpMethod, .securityKeyPIN, .phone, .conflict:
            overlay = .storeLost
            keptReason = nil
            revision = nil
        default: break
        }
        say(Self.storeLostText(lost), .error)
        return effects + (configuration.bell ? [.bell] : [])
    }

    static func storeLostText(_ lost: String) -> String {
        "READ-ONLY: \(lost); nothing can be written from this console: quit and open the store again"
    }

    /// A write asked for after the store was lost: refused here with the reason, no preview asked for (the write
    /// path refuses it too). Returns whether it was refused.
    private mutating func refusedAsLost() -> Bool {
        guard let storeLost else { return false }
        overlay = nil
        say("Refused, nothing was written: \(storeLost); quit and open the store again", .error)
        return true
    }

    /// A write asked for on a console that cannot write (the store lost, `--read-only`, a store file this user
    /// cannot write): refused here with the reason, before any dialog, so none offers a Publish that the write path
    /// would refuse. Returns whether it was refused.
    private mutating func refusedAsUnwritable() -> Bool {
        if refusedAsLost() { return true }
        guard let header = model?.header, header.readOnly else { return false }
        overlay = nil
        say(Self.publishText(.readOnly(header.readOnlyCause ?? .requested)), .error)
        return true
    }

    /// While a confirm (or reason) dialog is open and the store moves under it (a colleague's publish, a kill) or
    /// the verdict changes, asks the write path again for the same operation on what the store holds now; the
    /// answer replaces the dialog (`.previewReady`), re-judged, with the typed reason kept. Asked once per move.
    private mutating func reviseOpenDialog(_ m: ConsoleModel) -> [ConsoleEffect] {
        let preview: ChangePreview
        switch overlay {
        case .confirm(let p, _), .reason(let p, _, _): preview = p
        default: return []
        }
        guard let version = m.header.templateVersion else { return [] }
        // Moved means newer than the dialog's base. The dialog can be ahead of the snapshot: a conflict's
        // re-apply is prepared on the winner's version, which the console's own poll may not have read yet, and
        // taking that older snapshot for a move replaced the dialog (focus back on Cancel) under the operator.
        let moved =
            if let now = Int(version), let base = Int(preview.baseVersion) { now > base } else { version != preview.baseVersion }
        let rejudge = !preview.guardrail.reasons.isEmpty && m.crash.verdict != preview.guardrail.verdict
        guard moved || rejudge else { return [] }
        let key = version + " " + m.crash.verdict.description
        guard revision?.key != key, revisedFor != key else { return [] }
        var operation = preview.request.operation
        // "The last change" means the one the operator saw: pinned, so a colleague's publish is not undone instead.
        if case .rollbackLast = operation, let base = Int(preview.baseVersion) {
            operation = .rollback(toVersion: base - 1)
        }
        let request = ChangeRequest(id: nextRequestID, operation: operation)
        nextRequestID += 1
        let base = Int(preview.baseVersion) ?? Int.max
        revision = Revision(
            request: request, key: key, intervening: m.changes.filter { (Int($0.version) ?? 0) > base })
        revisedFor = key
        return [.preview(request)]
    }

    /// A change asked for while the display is frozen is previewed on what the store holds now: when that is newer
    /// than the version on screen, the dialog says so ("updated while open", who changed what), as when the store
    /// moves under an open dialog, so that the operator judges the change on what it will really do.
    private func noteMovedSinceShown(_ preview: inout ChangePreview) {
        guard frozen, let shownText = model?.header.templateVersion, let shown = Int(shownText),
            let base = Int(preview.baseVersion), base > shown
        else { return }
        preview.supersedes = shownText
        let live = heldModel?.changes ?? []
        preview.movedBy = live.filter { (Int($0.version) ?? 0) > shown && (Int($0.version) ?? 0) <= base }.reversed()
    }

    /// Asks again for the open history or audit list (also while it is still loading: the answer under way may
    /// predate the new version). Its answer keeps the selection on the same entry.
    private func reloadOpenList() -> [ConsoleEffect] {
        switch overlay {
        case .history: [.loadHistory]
        case .audit: [.loadAudit]
        default: []
        }
    }

    /// `cursor` on the rows `was` (their keys, in order), moved to the same key among `now`; when that entry is
    /// gone, the same row number, within the new rows. The list does not scroll unless the selection would leave
    /// the window, so new entries at the top come into view.
    private func following<K: Equatable>(_ cursor: ListCursor, from was: [K], to now: [K]) -> ListCursor {
        let selected = was.indices.contains(cursor.selected) ? was[cursor.selected] : nil
        let target = selected.flatMap { key in now.firstIndex(of: key) } ?? cursor.selected
        var c = ListCursor(selected: target, offset: cursor.offset)
        c.move(by: 0, count: now.count, page: ConsoleScreen.listRows(for: screenSize))
        return c
    }

    private func isPublishing(_ id: Int) -> Bool { inFlight(id) != nil }

    /// The two-person request whose approval `id` is on screen ("touch your security key"), nil otherwise.
    private func approvalOnScreen(_ id: Int) -> String? {
        guard case .approvingRequest(let requestID, let request, _, _) = overlay, requestID == id else { return nil }
        return request
    }

    /// The publish `id` while it is on screen: in flight, or waiting for the security key that approves it.
    private func inFlight(_ id: Int) -> ConfirmedChange? {
        switch overlay {
        case .publishing(let r) where r.preview.request.id == id: r
        case .securityKey(let r, _, _) where r.preview.request.id == id: r
        case .phone(let r, _, _, _, _) where r.preview.request.id == id: r
        default: nil
        }
    }

    /// Shows a message under the panels. A result (success, warning, error) stays until the operator's next key
    /// and goes into the log as well, stamped when it arrived; an information expires by itself.
    private mutating func say(_ text: String, _ kind: Notice.Kind) {
        notice = Notice(text, kind, shownAt: wallNow)
        guard kind != .info else { return }
        let severity: NotableEvent.Severity = kind == .error ? .critical : kind == .warning ? .warning : .info
        verdictLog.append(NotableEvent(at: wallNow ?? Instant(microseconds: 0), severity: severity, text: text))
        if verdictLog.count > 100 { verdictLog.removeFirst(verdictLog.count - 100) }
    }

    /// The longest text the `=` prompt takes: more than any percentage Remote Config can hold (`0.000001%`).
    static let valueLength = 24

    // MARK: Keys

    /// Keys while the screen is smaller than `ConsoleScreen.minimumSize` and shows only "terminal too small":
    /// quit, redraw and Esc work; every other key is ignored, so nothing is opened, typed or confirmed unseen.
    private mutating func handleKeyTooSmall(_ key: Key) -> [ConsoleEffect] {
        if key == .escape || key == .control("l") { return handleKey(key) }
        return KeyMap.intent(for: key) == .quit ? [.quit] : []
    }

    /// The screen became too small to draw: every dialog that leads to a write is cancelled as Esc would cancel it
    /// (a security key's or phone's approval is abandoned too), so none can be confirmed while it cannot be seen.
    /// A publish already in flight goes on (it cannot be called back); read-only views stay.
    private mutating func closeUnseenDialogs() -> [ConsoleEffect] {
        var effects: [ConsoleEffect] = []
        // Esc steps back one dialog at a time (a conflict's re-apply, a method chooser); a few presses close all.
        for _ in 0..<4 {
            switch overlay {
            case .valuePrompt, .preparing, .confirm, .reason, .stepUp, .stepUpMethod, .securityKeyPIN, .securityKey,
                .approvingRequest, .phone, .conflict, .planCode, .palette:
                let before = overlay
                effects += handleKey(.escape)
                if overlay == before { return effects }
            default:
                return effects
            }
        }
        return effects
    }

    private mutating func handleKey(_ key: Key) -> [ConsoleEffect] {
        if key == .control("l") { return [.redraw] }
        // A result stays until the operator's next key (it is in the log too); the key may say something new.
        if let n = notice, n.lifetime == nil { notice = nil }
        guard let overlay else {
            if logFilter?.field != nil { return handleLogFilterKey(key) }
            return handleMainKey(key)
        }
        switch overlay {
        case .help(let scroll):
            switch key {
            case .escape, .character("q"), .character("?"):
                self.overlay = nil
            default:
                let count = HelpScreen.lines(for: self).count
                let page = ConsoleScreen.listRows(for: screenSize)
                if let target = scrollTarget(key, current: scroll, count: count, page: page) {
                    self.overlay = .help(scroll: target)
                }
            }
            return []

        case .storeLost:
            if key == .escape || key == .enter { self.overlay = nil }
            return []

        case .verdict(let scroll):
            switch key {
            case .escape, .character("q"), .character("v"), .enter:
                self.overlay = nil
            default:
                let count = VerdictPane.lines(for: self, width: screenSize.width - 4).count
                let page = ConsoleScreen.listRows(for: screenSize)
                if let target = scrollTarget(key, current: scroll, count: count, page: page) {
                    self.overlay = .verdict(scroll: target)
                }
            }
            return []

        case .valuePrompt(var field, let error):
            switch field.handle(key) {
            case .cancelled:
                self.overlay = nil
                return []
            case .submitted:
                do {
                    let micro = try PercentText.parse(field.text)
                    if let m = model, m.condition.desiredMicroPercent == micro, m.condition.state != .killed {
                        self.overlay = .valuePrompt(
                            field: field,
                            error:
                                "already at \(PercentText.format(micro)): nothing to change; type another value or Esc")
                        return []
                    }
                    return startChange(.rollout(.set(micro)))
                } catch {
                    self.overlay = .valuePrompt(field: field, error: error.description)
                    return []
                }
            case .edited:
                self.overlay = .valuePrompt(field: field, error: nil)
                return []
            case .ignored:
                if case .character = key {
                    self.overlay = .valuePrompt(
                        field: field, error: "a percentage has at most \(Self.valueLength) characters, such as 12.5")
                } else {
                    self.overlay = .valuePrompt(field: field, error: error)
                }
                return []
            }

        case .preparing:
            if key == .escape || key == .character("q") { cancelWrite() }
            return []

        case .confirm(let preview, let focus):
            switch key {
            case .tab, .backTab, .left, .right, .character("h"), .character("l"):
                self.overlay = .confirm(preview, focus: focus.other)
            case .enter:
                if focus == .cancel { cancelWrite() } else { return afterConfirm(preview) }
            case .character("y"), .character("Y"):
                return afterConfirm(preview)
            case .escape, .character("q"), .character("n"), .character("N"):
                cancelWrite()
            default: break
            }
            return []

        case .reason(let preview, var field, let error):
            switch field.handle(key) {
            case .cancelled:
                cancelWrite()
            case .submitted:
                let reason = field.text.trimmingSpaces
                guard !reason.isEmpty else {
                    self.overlay = .reason(preview, field: field, error: "A reason is required for an increase.")
                    return []
                }
                return afterReason(preview, reason: reason)
            case .edited:
                self.overlay = .reason(preview, field: field, error: nil)
            case .ignored:
                self.overlay = .reason(preview, field: field, error: error)
            }
            return []

        case .stepUp(let preview, let reason, var field, let error):
            switch field.handle(key) {
            case .cancelled:
                cancelWrite()
            case .submitted:
                guard field.text.count >= 6 else {
                    self.overlay = .stepUp(
                        preview, reason: reason, field: field,
                        error: "Type the 6-digit code from your authenticator app.")
                    return []
                }
                return publish(ConfirmedChange(preview: preview, reason: reason, stepUpCode: field.text))
            case .edited:
                self.overlay = .stepUp(preview, reason: reason, field: field, error: nil)
            case .ignored:
                self.overlay = .stepUp(preview, reason: reason, field: field, error: error)
            }
            return []

        case .publishing:
            // A compare-and-swap in flight cannot be called back; its answer closes this.
            return []

        case .stepUpMethod(let preview, let reason, let selected):
            let options = preview.stepUpOptions
            switch key {
            case .up, .character("k"), .backTab:
                self.overlay = .stepUpMethod(preview, reason: reason, selected: max(0, selected - 1))
            case .down, .character("j"), .tab:
                self.overlay = .stepUpMethod(preview, reason: reason, selected: min(options.count - 1, selected + 1))
            case .enter:
                return useStepUp(options[min(selected, options.count - 1)], preview, reason: reason)
            case .character(let c) where c.wholeNumberValue.map { (1...options.count).contains($0) } ?? false:
                return useStepUp(options[c.wholeNumberValue! - 1], preview, reason: reason)
            case .escape, .character("q"):
                cancelWrite()
            default: break
            }
            return []

        case .approvingRequest(let id, let request, _, _):
            // As for a change's key: abandoned on the device; whatever it returns is not published.
            guard key == .escape || key == .character("q") else { return [] }
            self.overlay = nil
            say("Cancelled: the security key's approval of request \(request) was abandoned; nothing was written.", .info)
            return [.cancelApproval(requestID: id)]

        case .securityKey(let request, _, _):
            // The key's request is abandoned (cancelled on the device; whatever it returns is not published).
            guard key == .escape || key == .character("q") else { return [] }
            self.overlay = nil
            keptReason = nil
            revision = nil
            say("Cancelled: the security key's approval was abandoned; nothing was written.", .info)
            return [.cancelApproval(requestID: request.preview.request.id)]

        case .phone(let request, let status, var field, let error, let checking):
            let id = request.preview.request.id
            guard !checking else { return [] }  // the provider and the write path have the code
            if key == .character("c") || key == .character("C") {
                guard status != nil else { return [] }
                return [.phoneCall(requestID: id)]
            }
            switch field.handle(key) {
            case .cancelled:
                self.overlay = nil
                keptReason = nil
                revision = nil
                say("Cancelled: the phone verification was cancelled; nothing was published (the audit log records it).", .info)
                return [.phoneCancel(requestID: id)]
            case .submitted:
                guard status != nil, field.text.count >= 4 else {
                    self.overlay = .phone(
                        request, status: status, field: field,
                        error: status == nil ? "Wait for the code to be sent." : "Type the code sent to your phone.", checking: false)
                    return []
                }
                let checked = ConfirmedChange.withPhone(request.preview, reason: request.reason, code: field.text)
                self.overlay = .phone(checked, status: status, field: field, error: nil, checking: true)
                return [.publish(checked)]
            case .edited:
                self.overlay = .phone(request, status: status, field: field, error: nil, checking: false)
            case .ignored:
                self.overlay = .phone(request, status: status, field: field, error: error, checking: false)
            }
            return []

        case .securityKeyPIN(let preview, let reason, var field, let error):
            switch field.handle(key) {
            case .cancelled:
                cancelWrite()
            case .submitted:
                guard !field.text.isEmpty else {
                    self.overlay = .securityKeyPIN(preview, reason: reason, field: field, error: "Type the key's PIN (Esc cancels).")
                    return []
                }
                return approveWithSecurityKey(preview, reason: reason, pin: field.text)
            case .edited:
                self.overlay = .securityKeyPIN(preview, reason: reason, field: field, error: nil)
            case .ignored:
                self.overlay = .securityKeyPIN(preview, reason: reason, field: field, error: error)
            }
            return []

        case .conflict(let conflict, let focus):
            switch key {
            case .tab, .backTab, .left, .right, .character("h"), .character("l"):
                self.overlay = .conflict(conflict, focus: focus.other)
            case .enter:
                if focus == .cancel { cancelWrite() } else { return startChange(conflict.request.operation) }
            case .character("y"), .character("Y"):
                return startChange(conflict.request.operation)
            case .escape, .character("q"), .character("n"), .character("N"):
                cancelWrite()
            default: break
            }
            return []

        case .history(let entries, let cursor):
            if handleFilterKey(key, overlay: overlay) { return [] }
            if key == .escape || key == .character("q") || key == .character("h") {
                self.overlay = nil
                listFilter = nil
            } else if let entries {
                let shown = filteredRows(overlay)
                if key == .enter {
                    guard !shown.isEmpty else { return [] }
                    let record = entries[shown[min(cursor.selected, shown.count - 1)]]
                    return openVersion(Int(record.version) ?? 0, back: overlay)
                }
                self.overlay = .history(entries: entries, cursor: moved(cursor, key, count: shown.count))
            }
            return []

        case .audit(let log, let cursor):
            if handleFilterKey(key, overlay: overlay) { return [] }
            if key == .escape || key == .character("q") || key == .character("a") {
                self.overlay = nil
                listFilter = nil
            } else if let log {
                let shown = filteredRows(overlay)
                if key == .enter {
                    guard !shown.isEmpty else { return [] }
                    let entry = log.entries[shown[min(cursor.selected, shown.count - 1)]]
                    guard let version = entry.version else {
                        say("Audit entry #\(entry.sequence) names no version: nothing to open", .info)
                        return []
                    }
                    return openVersion(version, back: overlay)
                }
                self.overlay = .audit(log: log, cursor: moved(cursor, key, count: shown.count))
            }
            return []

        case .palette(var palette):
            return handlePaletteKey(key, &palette)

        case .planCode(var field, let error):
            switch field.handle(key) {
            case .cancelled:
                self.overlay = nil
                say("The plan stays paused; nothing was written.", .info)
            case .submitted:
                guard field.text.count >= 6 else {
                    self.overlay = .planCode(field: field, error: "Type the 6-digit code from your authenticator app.")
                    return []
                }
                self.overlay = nil
                return [.planControl(pause: false, code: field.text)]
            case .edited:
                self.overlay = .planCode(field: field, error: nil)
            case .ignored:
                self.overlay = .planCode(field: field, error: error)
            }
            return []

        case .version(let number, let detail, let scroll, let back):
            switch key {
            case .escape, .character("q"), .backspace, .left:
                self.overlay = back
                clampScroll()
            case .character("r"), .character("R"):
                guard let detail else { return [] }
                if detail.isCurrent {
                    say("v\(number) is the version the store serves now: nothing to roll back to", .info)
                    return []
                }
                return startChange(.rollback(toVersion: number))
            default:
                let count = VersionPane.lines(for: self, width: screenSize.width - 4).count
                let page = ConsoleScreen.listRows(for: screenSize)
                if let target = scrollTarget(key, current: scroll, count: count, page: page) {
                    self.overlay = .version(number: number, detail: detail, scroll: target, back: back)
                }
            }
            return []
        }
    }

    // MARK: The command palette

    /// Keys in the palette: typing edits the command (the list follows), ↑↓ choose among the matches, Tab
    /// completes the chosen name, Enter runs it, Esc closes.
    private mutating func handlePaletteKey(_ key: Key, _ palette: inout PaletteState) -> [ConsoleEffect] {
        let count = palette.matches.count
        switch key {
        case .up, .control("p"):
            palette.selected = max(0, palette.selected - 1)
        case .down, .control("n"):
            palette.selected = max(0, min(count - 1, palette.selected + 1))
        case .tab:
            guard count > 0 else { break }
            let chosen = palette.matches[min(palette.selected, count - 1)].command
            palette.field = TextField(chosen.name + (chosen.arguments.isEmpty ? "" : " "), maxLength: 80)
            palette.selected = 0
            palette.error = nil
        default:
            switch palette.field.handle(key) {
            case .cancelled:
                overlay = nil
                return []
            case .submitted:
                return runPalette(palette)
            case .edited:
                palette.selected = 0
                palette.error = nil
            case .ignored:
                break
            }
        }
        overlay = .palette(palette)
        return []
    }

    /// Runs the chosen command through the intent of its key, or the change request its key's dialog makes;
    /// a command that cannot run keeps the palette open with the reason.
    private mutating func runPalette(_ palette: PaletteState) -> [ConsoleEffect] {
        var palette = palette
        func refuse(_ why: String) -> [ConsoleEffect] {
            palette.error = why
            overlay = .palette(palette)
            return []
        }
        let matches = palette.matches
        guard !matches.isEmpty else {
            return refuse("no command matches '\(palette.field.text)'; clear the line to list them all")
        }
        let match = matches[min(palette.selected, matches.count - 1)]
        let command = match.command
        let args = match.arguments
        let usage = "usage: " + command.name + (command.arguments.isEmpty ? "" : " " + command.arguments)
        func version(_ word: String) -> Int? {
            Int(word.hasPrefix("v") ? String(word.dropFirst()) : word).flatMap { $0 > 0 ? $0 : nil }
        }
        let takesArgument: Set<PaletteCommand.Action> = [.set, .nudge, .rollback, .theme, .gotoVersion, .approve]
        if args.count > (takesArgument.contains(command.action) ? 1 : 0) { return refuse(usage) }
        overlay = nil
        switch command.action {
        case .set:
            guard let text = args.first else { return refuse(usage) }
            let micro: MicroPercent
            do { micro = try PercentText.parse(text) } catch { return refuse(error.description) }
            if let m = model, m.condition.desiredMicroPercent == micro, m.condition.state != .killed {
                return refuse("already at \(PercentText.format(micro)): nothing to change")
            }
            return startChange(.rollout(.set(micro)))
        case .nudge:
            guard let text = args.first else { return refuse(usage) }
            if text == "+" { return perform(.nudgeUp) }
            if text == "-" { return perform(.nudgeDown) }
            guard let sign = text.first, sign == "+" || sign == "-" else {
                return refuse("say which way: nudge +\(text) or nudge -\(text)")
            }
            let points: MicroPercent
            do { points = try PercentText.parse(String(text.dropFirst())) } catch { return refuse(error.description) }
            return startChange(.rollout(.nudge(sign == "+" ? points : .zero - points)))
        case .kill: return perform(.kill)
        case .resume: return perform(.resume)
        case .rollback:
            guard let text = args.first else { return perform(.rollbackLast) }
            guard let number = version(text) else { return refuse("'\(text)' is not a version number; " + usage) }
            return startChange(.rollback(toVersion: number))
        case .planPause, .planResume:
            let wanted: RampState.Phase = command.action == .planPause ? .running : .paused
            if storeLost == nil, let plan = model?.plan, plan.phase != wanted {
                return refuse("the ramp plan is \(plan.phase.rawValue), not \(wanted.rawValue)")
            }
            return perform(.togglePlan)
        case .planSkip: return perform(.skipPlanStep)
        case .approve:
            guard let request = args.first else { return refuse(usage) }
            if refusedAsLost() { return [] }
            if let header = model?.header, header.readOnly {
                let refusal = Self.publishText(.readOnly(header.readOnlyCause ?? .requested))
                say(refusal + "; request \(request) was not approved", .error)
                return []
            }
            let id = nextRequestID
            nextRequestID += 1
            overlay = .approvingRequest(requestID: id, request: request, since: wallNow, seconds: Self.securityKeySeconds)
            return [.approveRequest(requestID: id, request: request)]
        case .theme:
            guard let name = args.first?.lowercased() else { return perform(.nextTheme) }
            let names = configuration.themeNames
            guard let index = names.firstIndex(where: { $0.lowercased() == name })
                ?? names.firstIndex(where: { $0.lowercased().hasPrefix(name) })
            else { return refuse("no theme '\(name)': " + names.joined(separator: ", ")) }
            themeIndex = index
            say("Theme \(themeName)", .info)
            return []
        case .gotoVersion:
            guard let text = args.first else { return refuse(usage) }
            guard let number = version(text) else { return refuse("'\(text)' is not a version number; " + usage) }
            overlay = .version(number: number, detail: nil, scroll: 0, back: nil)
            return [.loadVersion(number)]
        case .source:
            guard let header = model?.header else {
                say("No data from the store yet", .info)
                return []
            }
            let asOf = header.dataAsOf.map { Format.time($0, utcOffsetSeconds: configuration.utcOffsetSeconds) }
            let freshness = storeLost ?? (isStale ? "stale" + (asOf.map { " since " + $0 } ?? "") : "live" + (asOf.map { " at " + $0 } ?? ""))
            say("Source: \(header.store) · project \(header.project) · v\(header.templateVersion ?? "–") · \(freshness)", .info)
            return []
        case .history: return perform(.showHistory)
        case .audit: return perform(.showAudit)
        case .why: return perform(.showVerdict)
        case .help: return perform(.showHelp)
        }
    }

    // MARK: The log's filter

    /// Keys while the log's `/` filter is typed: the log follows each keystroke; Enter keeps the filter, Esc drops it.
    private mutating func handleLogFilterKey(_ key: Key) -> [ConsoleEffect] {
        guard var filter = logFilter, var field = filter.field else { return [] }
        switch field.handle(key) {
        case .cancelled:
            logFilter = nil
        case .submitted:
            filter.field = nil
            logFilter = filter.text.isEmpty ? nil : filter
        case .edited:
            filter.field = field
            filter.text = field.text
            logFilter = filter
        case .ignored:
            break
        }
        // A selected change the filter hides gives way to the first one it shows.
        if let selected = logSelection, !logVersions.contains(selected) { logSelection = logVersions.first }
        return []
    }

    // MARK: Mouse

    /// The wheel scrolls what is open by three lines a notch (help, why, a version), moves the selection of a list
    /// or the palette, or of the log while it has the focus; elsewhere it does nothing.
    private mutating func handleWheel(_ notches: Int) -> [ConsoleEffect] {
        let lines = notches * 3
        let page = ConsoleScreen.listRows(for: screenSize)
        func scrolled(_ current: Int, _ count: Int) -> Int { min(max(0, current + lines), max(0, count - page)) }
        switch overlay {
        case .help(let scroll):
            overlay = .help(scroll: scrolled(scroll, HelpScreen.lines(for: self).count))
        case .verdict(let scroll):
            overlay = .verdict(scroll: scrolled(scroll, VerdictPane.lines(for: self, width: screenSize.width - 4).count))
        case .version(let number, let detail, let scroll, let back):
            let count = VersionPane.lines(for: self, width: screenSize.width - 4).count
            overlay = .version(number: number, detail: detail, scroll: scrolled(scroll, count), back: back)
        case .history(let entries?, var cursor):
            cursor.move(by: lines, count: filteredRows(overlay).count, page: page)
            overlay = .history(entries: entries, cursor: cursor)
        case .audit(let log?, var cursor):
            cursor.move(by: lines, count: filteredRows(overlay).count, page: page)
            overlay = .audit(log: log, cursor: cursor)
        case .palette(var palette):
            palette.selected = max(0, min(palette.matches.count - 1, palette.selected + notches))
            overlay = .palette(palette)
        case nil:
            let versions = logVersions
            guard let selected = logSelection, let index = versions.firstIndex(of: selected) else { return [] }
            logSelection = versions[min(max(0, index + notches), versions.count - 1)]
        default: break
        }
        return []
    }

    /// A click on a dialog button acts like `y` (the action) or `n` (Cancel); a click on a list row selects it, and
    /// a click on the selected row opens it, like Enter.
    private mutating func handleClick(_ target: ClickTarget) -> [ConsoleEffect] {
        switch (overlay, target) {
        case (.confirm, .button(let b)), (.conflict, .button(let b)):
            return handleKey(b == .act ? .character("y") : .character("n"))
        case (.history(let entries?, let cursor), .row(let i)):
            if i == cursor.selected { return handleKey(.enter) }
            overlay = .history(entries: entries, cursor: selecting(cursor, i))
        case (.audit(let log?, let cursor), .row(let i)):
            if i == cursor.selected { return handleKey(.enter) }
            overlay = .audit(log: log, cursor: selecting(cursor, i))
        case (nil, .version(let number)):
            overlay = .version(number: number, detail: nil, scroll: 0, back: nil)
            return [.loadVersion(number)]
        default: break
        }
        return []
    }

    private func selecting(_ cursor: ListCursor, _ row: Int) -> ListCursor {
        var c = cursor
        c.move(by: row - cursor.selected, count: filteredRows(overlay).count, page: ConsoleScreen.listRows(for: screenSize))
        return c
    }

    // MARK: Lists: filter and drill-down

    /// `/` in a list opens the filter; while it is typed, keys edit it and the list follows each keystroke. Returns
    /// whether the key was the filter's.
    private mutating func handleFilterKey(_ key: Key, overlay: Overlay) -> Bool {
        guard var filter = listFilter, var field = filter.field else {
            guard key == .character("/") else { return false }
            let text = listFilter?.text ?? ""
            listFilter = ListFilter(text: text, field: TextField(text, maxLength: 80))
            return true
        }
        switch field.handle(key) {
        case .cancelled:
            listFilter = nil
        case .submitted:
            filter.field = nil
            listFilter = filter.text.isEmpty ? nil : filter
        case .edited:
            filter.field = field
            filter.text = field.text
            listFilter = filter
        case .ignored:
            return true
        }
        // The selection starts again at the first row that matches.
        switch overlay {
        case .history(let entries?, _): self.overlay = .history(entries: entries, cursor: ListCursor())
        case .audit(let log?, _): self.overlay = .audit(log: log, cursor: ListCursor())
        default: break
        }
        return true
    }

    /// The indices of the rows the open list shows under its filter.
    func filteredRows(_ overlay: Overlay?) -> [Int] {
        let filter = listFilter ?? ListFilter()
        let offset = configuration.utcOffsetSeconds
        switch overlay {
        case .history(let entries?, _): return filter.matches(entries.map { ListRows.history($0, utcOffsetSeconds: offset) })
        case .audit(let log?, _): return filter.matches(log.entries.map { ListRows.audit($0, utcOffsetSeconds: offset) })
        default: return []
        }
    }

    private mutating func openVersion(_ number: Int, back: Overlay) -> [ConsoleEffect] {
        overlay = .version(number: number, detail: nil, scroll: 0, back: back)
        return [.loadVersion(number)]
    }

    /// The versions of the published changes in the main screen's log, in the order the log draws them.
    var logVersions: [Int] {
        guard let model else { return [] }
        return PanelText.logItems(model, self).compactMap {
            if case .change(let c) = $0 { Int(c.version) } else { nil }
        }
    }

    /// Keys while the log has the focus: ↑↓ (and j k, Home End) move between its published changes,
    /// Enter opens the selected one like Enter on a history row, Esc and Tab leave. Returns nil for every other
    /// key, which then works as on the main screen (a nudge, a kill) with the focus kept.
    private mutating func handleLogKey(_ key: Key, selected: Int) -> [ConsoleEffect]? {
        let versions = logVersions
        guard let index = versions.firstIndex(of: selected) else {
            logSelection = versions.first
            return logSelection == nil ? nil : []
        }
        switch key {
        case .escape, .tab, .backTab:
            logSelection = nil
            notice = nil
            return []
        case .enter:
            overlay = .version(number: selected, detail: nil, scroll: 0, back: nil)
            return [.loadVersion(selected)]
        case .up, .down, .character("k"), .character("j"), .home, .end:
            let delta =
                switch key {
                case .up, .character("k"): -1
                case .down, .character("j"): 1
                case .home: -versions.count
                default: versions.count
                }
            logSelection = versions[min(max(0, index + delta), versions.count - 1)]
            return []
        default:
            return nil
        }
    }

    private mutating func handleMainKey(_ key: Key) -> [ConsoleEffect] {
        if let selected = logSelection, let effects = handleLogKey(key, selected: selected) { return effects }
        guard let intent = KeyMap.intent(for: key) else { return [] }
        return perform(intent)
    }

    /// What a main-screen intent does, whether its key or the command palette asked for it.
    private mutating func perform(_ intent: Intent) -> [ConsoleEffect] {
        switch intent {
        case .nudgeUp: return startChange(.rollout(.nudge(step)))
        case .nudgeDown: return startChange(.rollout(.nudge(.zero - step)))
        case .finerStep:
            stepIndex = max(0, stepIndex - 1)
            say("Step \(PercentText.format(step))", .info)
        case .coarserStep:
            stepIndex = min(configuration.steps.count - 1, stepIndex + 1)
            say("Step \(PercentText.format(step))", .info)
        case .typeExact:
            if refusedAsUnwritable() { return [] }
            let current = model.map { PercentText.formatNumber($0.condition.desiredMicroPercent) } ?? ""
            // Every printable character is taken as typed and the one percentage parser judges the whole text, as
            // for `rollout set` and the palette's `set`: a field that dropped what it did not expect turned `2,5`
            // into 25% and `1e1` into 11%.
            overlay = .valuePrompt(field: TextField(current, maxLength: Self.valueLength, selected: true), error: nil)
        case .kill: return startChange(.rollout(.kill))
        case .resume: return startChange(.rollout(.resume))
        case .rollbackLast:
            // Repeated presses walk back: each rollback goes one version before the one the last press restored.
            if let last = undoTrail.first, last > 1 { return startChange(.rollback(toVersion: last - 1)) }
            // "The last change" is the one on screen: pinned to the version before it, so that a change published
            // since (seen by the write path, not by a frozen display) is not the one undone.
            if let shown = model?.header.templateVersion.flatMap({ Int($0) }), shown > 1 {
                return startChange(.rollback(toVersion: shown - 1))
            }
            return startChange(.rollbackLast)
        case .togglePlan:
            if refusedAsUnwritable() { return [] }
            guard let plan = model?.plan, plan.phase == .running || plan.phase == .paused else {
                say("No running or paused ramp plan ('rollout plan start FILE')", .warning)
                return []
            }
            if plan.phase == .paused, plan.waitsForCode {
                overlay = .planCode(field: Self.codeField(), error: nil)
                return []
            }
            return [.planControl(pause: plan.phase == .running)]
        case .skipPlanStep:
            if refusedAsUnwritable() { return [] }
            guard let plan = model?.plan, plan.phase == .running || plan.phase == .paused, let next = plan.nextStep
            else {
                say("No plan step to skip to", .warning)
                return []
            }
            return startChange(.rollout(.set(plan.steps[next - 1])))
        case .showVerdict:
            overlay = .verdict(scroll: 0)
        case .focusLog:
            // The charts screen hides the log: focusing it there would move an invisible selection.
            guard !chartsShown else { return [] }
            guard let newest = logVersions.first else {
                say("The log shows no published change to open yet", .info)
                return []
            }
            logSelection = newest
            say("Log: ↑↓ select a change, Enter opens its version, Esc leaves", .info)
        case .showHistory:
            overlay = .history(entries: nil, cursor: ListCursor())
            return [.loadHistory]
        case .showAudit:
            overlay = .audit(log: nil, cursor: ListCursor())
            return [.loadAudit]
        case .nextTheme:
            themeIndex = (themeIndex + 1) % configuration.themeNames.count
            say("Theme \(themeName)", .info)
        case .toggleFreeze:
            if frozen {
                frozen = false
                if let held = heldModel { model = held }
                heldModel = nil
                say("Live again", .info)
            } else {
                frozen = true
                say("Display frozen; data keeps arriving. f unfreezes.", .warning)
            }
        case .showHelp:
            overlay = .help(scroll: 0)
        case .openPalette:
            overlay = .palette(PaletteState())
        case .filterLog:
            let text = logFilter?.text ?? ""
            logFilter = ListFilter(text: text, field: TextField(text, maxLength: 80, selected: true))
        case .redraw:
            return [.redraw]
        case .quit:
            return [.quit]
        case .cancel:
            // Esc takes back the newest thing on the main screen: a message, else the log's filter.
            if notice == nil, logFilter != nil {
                logFilter = nil
                if let selected = logSelection, !logVersions.contains(selected) { logSelection = logVersions.first }
            }
            notice = nil
        case .pauseSimulation, .fasterSimulation, .slowerSimulation:
            return simulationKey(intent)
        case .toggleCharts:
            chartsShown.toggle()
            say(chartsShown ? "Charts, last \(chartZoom.text): z zooms, c goes back to the panels" : "Panels", .info)
        case .cycleZoom:
            chartZoom = chartZoom.next
            // The main screen's attestation chart follows the same zoom.
            say(chartsShown ? "Charts: last \(chartZoom.text)" : "Attestation chart: last \(chartZoom.text) (c shows every chart)", .info)
        }
        return []
    }

    /// `p`, `>`, `<`: a command for the simulation driving the screen; without one, or past the ends of the speed
    /// ladder, a message instead.
    private mutating func simulationKey(_ intent: Intent) -> [ConsoleEffect] {
        guard let simulation else {
            say("No simulation drives this console: p, > and < work in 'rollout demo'", .info)
            return []
        }
        switch intent {
        case .fasterSimulation where simulation.isFastest:
            say("Already at the fastest speed, \(simulation.speed)", .info)
            return []
        case .slowerSimulation where simulation.isSlowest:
            say("Already at the slowest speed, \(simulation.speed)", .info)
            return []
        case .fasterSimulation: return [.simulation(.faster)]
        case .slowerSimulation: return [.simulation(.slower)]
        default: return [.simulation(.togglePause)]
        }
    }

    // MARK: The write path, as the console sees it

    private mutating func startChange(_ operation: ChangeOperation) -> [ConsoleEffect] {
        if refusedAsUnwritable() { return [] }
        let request = ChangeRequest(id: nextRequestID, operation: operation)
        nextRequestID += 1
        overlay = .preparing(request)
        notice = nil
        return [.preview(request)]
    }

    private mutating func afterConfirm(_ preview: ChangePreview) -> [ConsoleEffect] {
        // The dialog already said the guardrail refuses it: no reason to type for a change that will not be
        // written. The notice says why, in the guardrail's words, and that nothing was written.
        if preview.guardrail.refuses {
            overlay = nil
            let why = preview.guardrail.refusal?.reason
            say(
                // "Nothing was written" first: the guardrail's reason is long and the notice row is cut at its end.
                "Refused by guardrail, nothing was written: " + (why ?? preview.guardrail.verdict.labelText),
                .error)
            return []
        }
        if preview.requiresReason {
            // A reason typed before the store moved (or before a conflict) is offered again, to edit or keep.
            overlay = .reason(preview, field: TextField(keptReason ?? "", maxLength: 500, selected: true), error: nil)
            return []
        }
        return afterReason(preview, reason: "")
    }

    private mutating func afterReason(_ preview: ChangePreview, reason: String) -> [ConsoleEffect] {
        if !reason.isEmpty { keptReason = reason }
        if preview.requiresStepUp {
            let options = preview.stepUpOptions
            if options.count > 1 {
                overlay = .stepUpMethod(preview, reason: reason, selected: 0)
                return []
            }
            return useStepUp(options.first ?? .code, preview, reason: reason)
        }
        return publish(ConfirmedChange(preview: preview, reason: reason, stepUpCode: nil))
    }

    /// The chosen second factor: the code prompt, or the security key at once.
    private mutating func useStepUp(_ option: StepUpOption, _ preview: ChangePreview, reason: String) -> [ConsoleEffect] {
        switch option {
        case .securityKey:
            return approveWithSecurityKey(preview, reason: reason, pin: nil)
        case .phone:
            let request = ConfirmedChange.withPhone(preview, reason: reason)
            overlay = .phone(request, status: nil, field: Self.codeField(), error: nil, checking: false)
            return [.phoneStart(request)]
        case .code:
            overlay = .stepUp(preview, reason: reason, field: Self.codeField(), error: nil)
            return []
        }
    }

    /// How long a key waits for a touch when no preview says (the executor's default): the approval's countdown.
    static let securityKeySeconds = 30

    /// "Touch your security key": the executor has the key sign the change and publishes it in one effect.
    private mutating func approveWithSecurityKey(_ preview: ChangePreview, reason: String, pin: String?) -> [ConsoleEffect] {
        let request = ConfirmedChange.withSecurityKey(preview, reason: reason, pin: pin)
        overlay = .securityKey(request, since: wallNow, seconds: preview.securityKeySeconds)
        return [.publish(request)]
    }

    private mutating func publish(_ request: ConfirmedChange) -> [ConsoleEffect] {
        overlay = .publishing(request)
        return [.publish(request)]
    }

    private mutating func cancelWrite() {
        overlay = nil
        keptReason = nil
        revision = nil
        say("Cancelled; nothing was written.", .info)
    }

    /// The answer to a preview that opens no dialog: a refusal (`refusal`, in words `message`) or a failure to
    /// read the store (`refusal` nil). A revision of an open dialog closes it and says the store moved.
    private mutating func previewAnswered(_ id: Int, refusal: WriteRefusal?, message: String) -> [ConsoleEffect] {
        if let revision, revision.request.id == id {
            self.revision = nil
            switch overlay {
            case .confirm, .reason:
                overlay = nil
                keptReason = nil
                say(
                    "The store moved while the dialog was open; cannot \(revision.request.operation.text): \(message)"
                        + "; nothing was written", .warning)
            default: break
            }
            return []
        }
        guard case .preparing(let request) = overlay, request.id == id else { return [] }
        overlay = nil
        if case .nothingToChange? = refusal {
            say("Cannot \(request.operation.text): \(message)", .info)
        } else {
            say("Cannot \(request.operation.text): \(message)", .error)
        }
        return []
    }

    /// The answer to a publish the write path refused: the dialog or message is chosen by the refusal's case.
    private mutating func publishRefused(_ id: Int, _ refusal: WriteRefusal, intervening: [ChangeRecord]) -> [ConsoleEffect] {
        // A phone verification the provider has started (a refusal before that closes the dialog).
        var phoneStarted = false
        if case .phone(_, .some, _, _, _) = overlay { phoneStarted = true }
        guard let request = inFlight(id) else {
            // The answer to a request no longer on screen: conflicts and code prompts are for the open dialog only.
            switch refusal {
            case .conflict: return [.refresh]
            case .stepUpNeeded, .stepUpFailed: return []
            default:
                say(Self.publishText(refusal), Self.publishLevel(refusal))
                return [.refresh]
            }
        }
        switch refusal {
        case .conflict(let report):
            overlay = .conflict(
                ConflictDialog(
                    request: request.preview.request, expectedVersion: request.preview.baseVersion, report: report,
                    intervening: intervening), focus: .cancel)
            return [.refresh]
        case .stepUpBlocked(let r) where r.twoPersonRequest != nil:
            // Recorded, not refused for good: a second operator approves the request by its id.
            overlay = nil
            keptReason = nil
            say("Awaiting a second operator: request \(r.twoPersonRequest ?? ""); " + r.detail, .warning)
            return [.refresh]
        case .stepUpFailed where request.phone && phoneStarted:
            // A wrong phone code: the same verification takes another (the provider allows three).
            if case .phone(_, let status, _, _, _) = overlay {
                overlay = .phone(
                    ConfirmedChange.withPhone(request.preview, reason: request.reason), status: status,
                    field: Self.codeField(), error: refusal.description, checking: false)
            }
            return []
        case .stepUpNeeded where !request.securityKey && !request.phone,
            .stepUpFailed where !request.securityKey && !request.phone:
            // The code prompt reopens with the refusal's words.
            overlay = .stepUp(request.preview, reason: request.reason, field: Self.codeField(), error: refusal.description)
            return []
        default:
            overlay = nil
            say(Self.publishText(refusal), Self.publishLevel(refusal))
            return [.refresh]
        }
    }

    /// The message for a publish the write path refused, from the refusal's case and the core's words: `Refused by
    /// guardrail: …` (a policy says it is its refusal), `Refused: this session is read-only`, `Not published: …`.
    static func publishText(_ refusal: WriteRefusal) -> String {
        switch refusal {
        case .readOnly(let cause): "Refused: " + cause.description
        case .guardrail(let r), .stepUpNeeded(let r), .stepUpFailed(let r), .stepUpBlocked(let r), .policy(let r):
            "Refused by \(r.policy): " + r.detail
        case .nothingToChange, .conflict, .unexpectedCurrent, .plan, .invalidPercentage, .invalid:
            "Not published: " + refusal.description
        }
    }

    private static func publishLevel(_ refusal: WriteRefusal) -> Notice.Kind {
        if case .nothingToChange = refusal { return .info }
        return .error
    }

    static func codeField() -> TextField { TextField(content: .digits, maxLength: 8, masked: true) }

    // MARK: Scrolling

    private func moved(_ cursor: ListCursor, _ key: Key, count: Int) -> ListCursor {
        var c = cursor
        let page = ConsoleScreen.listRows(for: screenSize)
        switch key {
        case .up, .character("k"): c.move(by: -1, count: count, page: page)
        case .down, .character("j"): c.move(by: 1, count: count, page: page)
        case .pageUp: c.move(by: -page, count: count, page: page)
        case .pageDown, .character(" "): c.move(by: page, count: count, page: page)
        case .home, .character("g"): c.move(by: -count, count: count, page: page)
        case .end, .character("G"): c.move(by: count, count: count, page: page)
        default: break
        }
        return c
    }

    /// The new first line of a free-scrolling text (help), or nil when the key does not scroll.
    private func scrollTarget(_ key: Key, current: Int, count: Int, page: Int) -> Int? {
        let last = max(0, count - page)
        let target: Int
        switch key {
        case .up, .character("k"): target = current - 1
        case .down, .character("j"): target = current + 1
        case .pageUp: target = current - page
        case .pageDown, .character(" "): target = current + page
        case .home, .character("g"): target = 0
        case .end, .character("G"): target = last
        default: return nil
        }
        return min(max(0, target), last)
    }

    private mutating func clampScroll() {
        let page = ConsoleScreen.listRows(for: screenSize)
        switch overlay {
        case .help(let scroll):
            let count = HelpScreen.lines(for: self).count
            overlay = .help(scroll: min(scroll, max(0, count - page)))
        case .verdict(let scroll):
            let count = VerdictPane.lines(for: self, width: screenSize.width - 4).count
            overlay = .verdict(scroll: min(scroll, max(0, count - page)))
        case .history(let entries?, let cursor):
            var c = cursor
            c.move(by: 0, count: filteredRows(overlay).count, page: page)
            overlay = .history(entries: entries, cursor: c)
        case .audit(let log?, let cursor):
            var c = cursor
            c.move(by: 0, count: filteredRows(overlay).count, page: page)
            overlay = .audit(log: log, cursor: c)
        case .version(let number, let detail, let scroll, let back):
            let count = VersionPane.lines(for: self, width: screenSize.width - 4).count
            overlay = .version(number: number, detail: detail, scroll: min(scroll, max(0, count - page)), back: back)
        default: break
        }
    }
}
