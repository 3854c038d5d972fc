import Rollout
import Timekeeping

/// Everything that can happen to the console: keys, time, new data, and the outcomes of effects.
///
/// The terminal adapter turns key presses, resizes and clock ticks into events; the data source posts
/// `.snapshot`; the effect executor answers each effect with the events below. The reducer
/// (`ConsoleState.handle`) is the only place that reacts to them.
public enum ConsoleEvent: Hashable, Sendable {
    case key(Key)
    /// A mouse click on something the last frame drew (the adapter looks it up with `Grid.target(at:)`).
    case click(ClickTarget)
    /// The mouse wheel: notches, negative up. Scrolls the open list or text, or moves the log's selection.
    case wheel(Int)
    /// The adapter's clock; drives the data age and staleness (telemetry time: a simulation's, on its store).
    case tick(Instant)
    /// The wall clock, posted before each tick: what is timed for people (the flash, the hold-down, messages).
    case wallClock(Instant)
    case resize(Size)
    /// A fresh picture from the data source.
    case snapshot(ConsoleModel)
    /// The data source could not produce a snapshot; the last one stays on screen, marked stale.
    case sourceFailed(String)

    /// Answer to `.preview`: the confirm dialog opens with it.
    case previewReady(ChangePreview)
    /// Answer to `.preview`: the preview could not be computed (the store could not be read); not a refusal.
    case previewFailed(requestID: Int, message: String)
    /// Answer to `.preview` or `.publish`: the write path refused, or there is nothing to change; the reducer picks
    /// the dialog or message from the case (`intervening`: for a conflict, the changes published since, newest
    /// first).
    case writeRefused(requestID: Int, WriteRefusal, intervening: [ChangeRecord] = [])

    /// Answer to `.publish`: the new version is live.
    case published(PublishReceipt)
    /// Answer to `.publish`: anything else went wrong (I/O); nothing was written.
    case publishFailed(requestID: Int, message: String)
    /// Answer to `.publish` approved by a security key: the key needs its PIN (the console asks, masked, and
    /// tries again); nothing was written.
    case securityKeyNeedsPIN(requestID: Int)
    /// Answer to `.phoneStart` or `.phoneCall`: the provider's status of the phone verification of publish
    /// `requestID` (a code sent by SMS, a call placed). A provider's refusal answers `.writeRefused` (audited).
    case phoneStatus(requestID: Int, status: String)
    /// Posted after the write path's answer to a phone code when the provider's verification is over (410 after
    /// too many wrong codes, or the provider could not check it): no other code can pass it; the dialog closes.
    case phoneEnded(requestID: Int)

    /// Answer to `.loadHistory`: published changes, newest first.
    case historyLoaded([ChangeRecord])
    /// Answer to `.loadAudit`.
    case auditLoaded(AuditLog)
    /// Answer to `.loadHistory` or `.loadAudit` when loading failed.
    case loadFailed(message: String)
    /// Answer to `.loadVersion`: the version the drill-down opened (a failure answers `.loadFailed`).
    case versionLoaded(VersionDetail)
    /// Answer to `.planControl`: what happened to the plan, in words, and whether it was refused.
    case planControlled(message: String, refused: Bool)

    /// The simulation driving the screen (`rollout demo`), posted with every tick; never posted otherwise.
    case simulation(SimulationStatus)
    /// Answer to `.simulation`: the command was carried out, the status after it.
    case simulationChanged(SimulationStatus, after: SimulationCommand)
}

/// Work the reducer asks the adapters to do; it never does I/O itself.
///
/// `.preview`, `.publish`, `.loadHistory`, `.loadAudit` and `.loadVersion` go to the effect executor (off the input thread), which
/// answers with events. `.refresh`, `.redraw` and `.quit` are for the run loop itself.
public enum ConsoleEffect: Hashable, Sendable {
    /// Compute what the change would do against the store's current template; answer `.previewReady`,
    /// `.writeRefused` or `.previewFailed`. Also used for "re-apply on top" after a conflict (the same operation, a new request).
    case preview(ChangeRequest)
    /// Publish through the single write path (policy, guardrails, step-up, compare-and-swap on the preview's
    /// base); answer `.published`, `.writeRefused` or `.publishFailed`.
    case publish(ConfirmedChange)
    /// Answer `.historyLoaded` or `.loadFailed`.
    case loadHistory
    /// Answer `.auditLoaded` or `.loadFailed`.
    case loadAudit
    /// Read one version with its diff against the one before it; answer `.versionLoaded` or `.loadFailed`.
    case loadVersion(Int)
    /// Pause (true) or resume (false) the store's ramp plan, audited; answer `.planControlled`. `code`: a plan
    /// paused for a one-time code resumes with it, its waiting step published by this operator.
    case planControl(pause: Bool, code: String? = nil)
    /// Abandon the security-key approval of publish `requestID` (Esc on "touch your security key"): the run loop
    /// hands it to the executor's `interrupt` at once (not behind the publish it cancels); the key's request is
    /// cancelled and whatever it returns is not published.
    case cancelApproval(requestID: Int)
    /// `:approve REQUEST`: the operator's security key approves another operator's pending two-person request
    /// (`rollout approve REQUEST`), and the write path publishes it; answer `.published`, `.writeRefused` (a
    /// self-approval, an expired request, a moved base, a read-only session) or `.publishFailed` (no such request,
    /// no key), all with `requestID`. `.cancelApproval(requestID:)` abandons it like a publish's key.
    case approveRequest(requestID: Int, request: String)
    /// Start the phone verification of `change` (`ConfirmedChange.phone`): the provider sends a code by SMS, then
    /// calls; answer `.phoneStatus`, or `.writeRefused` when the policy or the provider refuses. The code typed
    /// then goes in `.publish` (`phoneCode`), checked by the provider and the write path.
    case phoneStart(ConfirmedChange)
    /// "Call me instead": the provider moves to its next channel (a voice call); answer `.phoneStatus`.
    case phoneCall(requestID: Int)
    /// Esc on the phone code: the provider's verification is cancelled (DELETE) and audited; no answer.
    case phoneCancel(requestID: Int)
    /// Fetch a snapshot now rather than at the next refresh.
    case refresh
    /// Repaint the whole terminal (Ctrl-L).
    case redraw
    /// Ring the terminal bell (once per rise of the verdict to HOLD or HALT, unless turned off).
    case bell
    /// Leave the console.
    case quit
    /// Pause, resume or change the speed of the simulation driving the screen; answer `.simulationChanged`.
    case simulation(SimulationCommand)
}
