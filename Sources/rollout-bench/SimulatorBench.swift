enum SimulatorBench {
    static let suites: [BenchSuite] = []
}
