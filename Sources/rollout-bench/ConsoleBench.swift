enum ConsoleBench {
    static let suites: [BenchSuite] = []
}
