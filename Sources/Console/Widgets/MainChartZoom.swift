import Timekeeping

extension AttestationInfo {
    /// The main screen's attestation chart at the charts' zoom (`z`), and the title that says its window.
    ///
    /// At 1 h the chart is the snapshot's own minutes, as before zooming existed. At 15 min it is the last 15 of
    /// them (and the current minute). At 6 h and 24 h it is read from the chart history (every cohort, per
    /// minute, from the store's counters); when a window has more minutes than the chart has columns, each
    /// column is the mean per minute of `minutesPerPoint` minutes, so the unit stays "per minute". Without a
    /// history (a model that carries none) the wide zooms fall back to the minutes there are and the title
    /// says so.
    public func zoomed(_ zoom: ChartZoom, history: ChartHistory?, chartWidth: Int) -> (info: AttestationInfo, title: String) {
        switch zoom {
        case .hour:
            return (self, "per minute, last \(perMinute.count) min")
        case .quarterHour:
            var info = self
            info.perMinute = Array(perMinute.suffix(zoom.minutes + 1))
            return (info, "per minute, last \(zoom.text)")
        case .sixHours, .day:
            guard let history, !history.minutes.isEmpty else {
                return (self, "per minute, last \(perMinute.count) min (no \(zoom.text) history)")
            }
            let minutes = history.minutes.suffix(zoom.minutes).map(\.all)
            let step = max(1, (minutes.count + max(1, chartWidth) - 1) / max(1, chartWidth))
            // Groups end at the newest minute: the first group may hold fewer minutes (its mean is over those).
            var points: [MinuteCounts] = []
            var end = minutes.count
            while end > 0 {
                let group = minutes[max(0, end - step)..<end]
                let sum = group.reduce(ArmCounts.zero, +)
                let n = group.count
                points.append(
                    MinuteCounts(
                        success: Int((Double(sum.successes) / Double(n)).rounded()),
                        failure: Int((Double(sum.failures) / Double(n)).rounded()), crashes: sum.crashes,
                        sessions: sum.sessions))
                end -= step
            }
            var info = self
            info.perMinute = points.reversed()
            info.minutesPerPoint = step
            info.seriesEnd = Instant(microseconds: history.end.microseconds - Int64(step) * 60_000_000)
            let unit = step == 1 ? "per minute" : "per minute (mean of \(step) min)"
            return (info, "\(unit), last \(zoom.text)")
        }
    }
}
