enum RemoteConfigBench {
    static let suites: [BenchSuite] = []
}
