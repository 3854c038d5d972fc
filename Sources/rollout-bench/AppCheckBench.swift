enum AppCheckBench {
    static let suites: [BenchSuite] = []
}
