enum TelemetryBench {
    static let suites: [BenchSuite] = []
}
