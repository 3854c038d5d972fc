import Telemetry

/// How fast simulated time runs against the wall clock.
public enum SimulationSpeed: Hashable, Sendable, CustomStringConvertible {
    /// Simulated seconds per wall second (`60`: an hour per minute).
    case factor(Double)
    /// As fast as the machine goes.
    case maximum

    /// `60`, `60x`, `0.5`, `max`.
    public init?(_ text: String) {
        if text == "max" {
            self = .maximum
            return
        }
        let digits = text.hasSuffix("x") ? String(text.dropLast()) : text
        guard let v = Double(digits), v.isFinite, v > 0, v <= SimulationClockRecord.maximumSpeed else { return nil }
        self = .factor(v)
    }

    public var description: String {
        switch self {
        case .factor(let v): v == v.rounded() ? "\(Int(v))x" : "\(v)x"
        case .maximum: "max"
        }
    }
}
