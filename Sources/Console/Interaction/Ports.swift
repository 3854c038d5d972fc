/// The console's ports: what it needs from the world, declared here beside the reducer that uses them (the ncurses
/// run loop in `Terminal` drives them; the application layer implements them on a store).

/// Where the console's picture comes from: the store and telemetry, wired by the executable.
public protocol ConsoleDataSource: Sendable {
    /// The current picture of the rollout.
    ///
    /// Called on a background thread about four times a second (never on the input thread, never two calls at
    /// once). A thrown error is shown on screen (`.sourceFailed`) and the previous picture stays, marked stale.
    func snapshot() throws -> ConsoleModel
}

/// Carries out the effects that need the store: previews, publishes, history and audit.
public protocol ConsoleEffectExecutor: Sendable {
    /// Performs `.preview`, `.publish`, `.loadHistory`, `.loadAudit` or `.loadVersion` and returns the events reporting the outcome
    /// (see `ConsoleEffect` for which answer each expects).
    ///
    /// Called on one background serial queue, one effect at a time, in the order the operator caused them; never
    /// on the input thread, so a slow store never freezes the keyboard. It is never given `.refresh`, `.redraw`
    /// or `.quit`, which the run loop handles itself.
    func perform(_ effect: ConsoleEffect) -> [ConsoleEvent]
    /// Carries out `.cancelApproval` at once (see the extension); never blocks.
    func interrupt(_ effect: ConsoleEffect)
}

extension ConsoleEffectExecutor {
    /// Carries out `.cancelApproval` at once, on the input thread, while `perform` may still be busy with the
    /// publish it cancels: it must not wait for that. The default does nothing (an executor without second
    /// factors has nothing to cancel).
    public func interrupt(_ effect: ConsoleEffect) {}
}
