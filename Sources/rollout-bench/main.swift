import Foundation

// `make bench`: every figure is printed beside the peer or limit it is compared with, measured in the same run.
// Usage: rollout-bench [SUITE...]   (no argument: all suites)
let requested = Set(CommandLine.arguments.dropFirst())
var failures = 0
for suite in BenchSuites.all where requested.isEmpty || requested.contains(suite.name) {
    print("== \(suite.name): \(suite.title)")
    // The dirty pages of the suites before are written back first: a suite's fsyncs must not wait for another's.
    sync()
    do {
        try suite.run()
    } catch {
        failures += 1
        print("!! \(suite.name) failed: \(error)")
    }
    print("")
    fflush(nil)
}
exit(failures == 0 ? 0 : 1)
