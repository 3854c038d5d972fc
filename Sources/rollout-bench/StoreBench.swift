enum StoreBench {
    static let suites: [BenchSuite] = []
}
