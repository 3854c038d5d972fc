import Console
import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import Terminal
import Timekeeping

/// The console's hot paths: building and rendering a frame, and the bytes a frame costs on the terminal.
enum ConsoleBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "console-frame", title: "console frame: state update + render at 200×60 vs the 2 ms budget") {
            try frameTime()
        },
        BenchSuite(name: "console-bytes", title: "console bytes written to the terminal per frame, idle and busy") {
            try bytesPerFrame()
        },
    ]

    static let start = Instant(seconds: 1_780_000_000)

    /// A busy rollout as the simulator would show it, at refresh number `tick` (counts move every tick).
    static func model(tick: Int) -> ConsoleModel {
        let now = start + .milliseconds(Int64(tick) * 250)
        let perMinute = (0..<180).map { i in
            MinuteCounts(success: 3_000 + ((i + tick / 240) * 7_919) % 900, failure: 40 + ((i + tick / 240) * 31) % 60)
        }
        let changes = (0..<60).map { (i: Int) -> ChangeRecord in
            let from = MicroPercent(10_000_000 - Int64(i) * 100_000)
            return ChangeRecord(
                version: String(400 - i), at: now - .minutes(Int64(i * 17)),
                actor: i % 3 == 0 ? "ana@example.com" : "bo@example.com",
                kind: .nudge, from: RolloutPosition(microPercent: from),
                to: RolloutPosition(microPercent: from + MicroPercent(100_000)),
                reason: "step \(i) of the plan, crash-free flat")
        }
        return ConsoleModel(
            header: HeaderInfo(
                store: "sqlite /var/lib/rollout/store.db", project: "demo-ios-app", templateVersion: "400",
                etag: "etag-400-9c1e2b4d", operatorID: "ana@example.com", dataAsOf: now, stepUpEnabled: true),
            condition: ConditionInfo(
                conditionName: "app_attest_rollout", expression: "percent('rollout-2026') <= 10",
                desiredMicroPercent: MicroPercent(10_000_000), observedExposure: 0.0931 + Double(tick % 50) / 10_000,
                propagation: 0.95 + Double(tick % 40) / 1_000, activeDevices: 1_000_000 + tick * 13,
                seed: "rollout-2026",
                exposedBand: PercentileBand(lower: MicroPercent(0), upper: MicroPercent(10_000_000), includesLower: true),
                controlBand: PercentileBand(lower: MicroPercent(50_000_000), upper: MicroPercent(60_000_000), includesLower: false), state: .rolling
            ),
            attestation: AttestationInfo(
                successTotal: 4_000_000 + tick * 857, failureTotal: 60_000 + tick * 13,
                successRate: WindowRates(
                    oneMinute: 3_428 + Double(tick % 17), fiveMinutes: 3_400, fifteenMinutes: 3_390),
                failureRate: WindowRates(oneMinute: 52 + Double(tick % 5), fiveMinutes: 50, fifteenMinutes: 49),
                perMinute: perMinute,
                failureClasses: [
                    FailureClass(name: "serverUnavailable", count: 50_000 + tick * 11),
                    FailureClass(name: "invalidInput", count: 7_000 + tick),
                    FailureClass(name: "unknownSystemFailure", count: 3_000 + tick / 2),
                ], budgetPerMinute: 6_000),
            crash: CrashInfo(
                exposed: CohortCrashStats(
                    users: 100_000 + tick * 3, crashFreeUsers: 0.99812, sessions: 400_000 + tick * 9,
                    crashFreeSessions: 0.99931),
                control: CohortCrashStats(
                    users: 100_100 + tick * 3, crashFreeUsers: 0.99840, sessions: 401_000 + tick * 9,
                    crashFreeSessions: 0.99950),
                difference: IntervalEstimate(estimate: -0.028, lower: -0.121 + Double(tick % 9) / 1_000, upper: 0.065),
                minimumDetectableEffect: 0.09, verdict: .ok, reasons: ["no difference detected"], guardrailsArmed: true),
            changes: changes,
            events: [
                NotableEvent(
                    at: now - .seconds(Int64(90)), severity: .warning, text: "serverUnavailable above baseline")
            ])
    }

    /// CPU time consumed by the calling thread, which excludes time spent waiting for a core.
    static func threadCPUNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    static func state(size: Size) -> ConsoleState {
        var s = ConsoleState(configuration: .init(themeNames: Theme.builtInNames), screenSize: size)
        _ = s.handle(.tick(start))
        _ = s.handle(.snapshot(model(tick: 0)))
        return s
    }

    static func frameTime() throws {
        let size = Size(width: 200, height: 60)
        var s = state(size: size)
        let models = (0..<64).map { model(tick: $0) }
        var checksum = 0
        for i in 0..<200 { checksum &+= ConsoleScreen.render(s, size: size).cells.count &+ i }
        let frames = 3_000
        var wall: [Double] = []
        var cpu: [Double] = []
        wall.reserveCapacity(frames)
        cpu.reserveCapacity(frames)
        for i in 0..<frames {
            let t0 = Stopwatch.nanoseconds()
            let c0 = threadCPUNanoseconds()
            _ = s.handle(.snapshot(models[i % models.count]))
            _ = s.handle(.tick(start + .milliseconds(Int64(i) * 250)))
            let grid = ConsoleScreen.render(s, size: size)
            checksum &+= Int(grid[3, 3].scalar.value)
            cpu.append(Double(threadCPUNanoseconds() - c0) / 1e6)
            wall.append(Double(Stopwatch.nanoseconds() - t0) / 1e6)
        }
        wall.sort()
        cpu.sort()
        let mean = wall.reduce(0, +) / Double(wall.count)
        report(
            "frame build + render, mean wall time (200×60)", value: mean, unit: "ms", limit: 2, higherIsBetter: false)
        report(
            "frame build + render, p99 wall time (200×60)", value: wall[frames * 99 / 100], unit: "ms", limit: 2,
            higherIsBetter: false)
        // Wall-clock tails on a shared machine measure the scheduler; the thread's CPU time measures the frame.
        report(
            "frame build + render, p99 thread CPU time (200×60)", value: cpu[frames * 99 / 100], unit: "ms",
            limit: 2, higherIsBetter: false)

        // The same with the confirm dialog open over the busy screen.
        if case .preview(let request)? = s.handle(.key(.character("+"))).first {
            _ = s.handle(
                .previewReady(
                    ChangePreview(
                        request: request, from: RolloutPosition(microPercent: MicroPercent(10_000_000)),
                        to: RolloutPosition(microPercent: MicroPercent(11_000_000)), baseVersion: "400", baseETag: "etag-400",
                        eligibleDeviceChange: 10_000, load: AttestationLoad(peakPerSecond: 41, budgetPerSecond: 100),
                        guardrail: GuardrailAssessment(verdict: .ok, reasons: ["no difference"]), requiresStepUp: true))
            )
        }
        let t0 = Stopwatch.nanoseconds()
        for i in 0..<frames {
            _ = s.handle(.snapshot(models[i % models.count]))
            checksum &+= ConsoleScreen.render(s, size: size).cells.count
        }
        let dialogMean = Double(Stopwatch.nanoseconds() - t0) / 1e6 / Double(frames)
        report(
            "frame with confirm dialog, mean (200×60)", value: dialogMean, unit: "ms", limit: 2, higherIsBetter: false)

        // The charts (c) at 24 h: a day of minutes summed into the panes' dot columns each frame.
        var charts = state(size: size)
        let day = (0..<ChartZoom.longestMinutes).map { i in
            ArmMinute(
                exposed: ArmCounts(successes: 400 + i % 37, failures: 3 + i % 5, crashes: i % 4, sessions: 900 + i % 50),
                control: ArmCounts(successes: 410 + i % 31, failures: 2 + i % 7, crashes: i % 5, sessions: 905 + i % 40))
        }
        let chartModels = models.map { m -> ConsoleModel in
            var m = m
            m.history = ChartHistory(minutes: day, end: start)
            return m
        }
        _ = charts.handle(.key(.character("c")))
        while charts.chartZoom != .day { _ = charts.handle(.key(.character("z"))) }
        let c0 = Stopwatch.nanoseconds()
        for i in 0..<frames {
            _ = charts.handle(.snapshot(chartModels[i % chartModels.count]))
            checksum &+= ConsoleScreen.render(charts, size: size).cells.count
        }
        let chartsMean = Double(Stopwatch.nanoseconds() - c0) / 1e6 / Double(frames)
        report("frame of the charts at 24 h, mean (200×60)", value: chartsMean, unit: "ms", limit: 2, higherIsBetter: false)
        if checksum == 42 { print("") }
    }

    /// Paints into a pipe through the real ncurses backend and counts what ncurses writes.
    static func bytesPerFrame() throws {
        for size in [Size(width: 200, height: 60), Size(width: 80, height: 24)] {
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else { throw BenchError("pipe failed") }
            #if os(Linux)
                // Room for a whole frame, so the bench can paint and then drain on one thread.
                _ = fcntl(fds[1], 1031 /* F_SETPIPE_SZ */, 1 << 20)
            #endif
            _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
            let input = open("/dev/null", O_RDONLY)
            setenv("LINES", String(size.height), 1)
            setenv("COLUMNS", String(size.width), 1)
            defer {
                close(fds[0])
                close(fds[1])
                close(input)
                unsetenv("LINES")
                unsetenv("COLUMNS")
            }
            func drain() -> Int {
                var total = 0
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let n = read(fds[0], &buffer, buffer.count)
                    if n <= 0 { return total }
                    total += n
                }
            }
            let screen: TerminalScreen
            do {
                screen = try TerminalScreen(
                    .init(
                        input: input, output: fds[1], terminalType: "xterm-256color",
                        requireTTY: false))
            } catch {
                throw BenchError("cannot open the ncurses backend on a pipe: \(error)")
            }
            guard screen.size == size else { throw BenchError("ncurses sees \(screen.size), expected \(size)") }
            let theme = Theme.default.resolved(for: .indexed256)
            var s = state(size: size)
            _ = drain()
            screen.paint(ConsoleScreen.render(s, size: size), theme: theme)
            let full = drain()

            let idleFrames = 100
            var idleBytes = 0
            for i in 0..<idleFrames {
                // Ticks move the clock but nothing on screen changes while the data is fresh.
                _ = s.handle(.tick(start + .milliseconds(Int64(i % 4) * 100)))
                screen.paint(ConsoleScreen.render(s, size: size), theme: theme)
                idleBytes += drain()
            }
            let busyFrames = 100
            var busyBytes = 0
            var busyCells = 0
            for i in 1...busyFrames {
                _ = s.handle(.snapshot(model(tick: i)))
                _ = s.handle(.tick(start + .milliseconds(Int64(i) * 250)))
                busyCells += screen.paint(ConsoleScreen.render(s, size: size), theme: theme)
                busyBytes += drain()
            }
            screen.close()
            _ = drain()
            let label = "\(size.width)×\(size.height)"
            report("first (full) frame \(label)", value: Double(full), unit: "bytes")
            report(
                "idle frame \(label)", value: Double(idleBytes) / Double(idleFrames), unit: "bytes", limit: 0,
                higherIsBetter: false)
            report(
                "busy frame \(label) (live counts, \(busyCells / busyFrames) cells changed)",
                value: Double(busyBytes) / Double(busyFrames), unit: "bytes", against: ("full frame", Double(full)),
                target: (0.25, false))
        }
    }
}

/// Keystroke to published: the console's reducer and its effect executor on a real store, as `rollout console`
/// runs them (minus the terminal): from the Enter that confirms a change to the new version being durable.
enum ConsoleLatencyBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "console-latency", title: "console keystroke → published version (real store, full write path)") {
            try keystrokeToPublished()
        }
    ]

    static func keystrokeToPublished() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-console-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        // Sessions open existing stores only: create it as `rollout init` does.
        let session = try Wiring.createStore(path: path, seed: "bench", operatorID: "bench@example.com")
        _ = try session.writePath().execute(
            WritePath.Request(
                intent: .rollout(.set(RemoteConfig.MicroPercent(percent: 60))), actor: "bench", reason: "bench",
                origin: "BENCH"))
        let source = try StoreConsoleSource(
            path: path, clock: SystemClock(), operatorID: "bench@example.com", readOnly: false, project: "bench")
        let executor = StoreConsoleExecutor(session: session)
        var state = ConsoleState(configuration: ConsoleState.Configuration(initialStep: 0), screenSize: Size(width: 120, height: 40))

        /// Feeds an event, runs the effects the way the run loop does, and feeds their answers back.
        func feed(_ event: ConsoleEvent) {
            var queue = [event]
            while !queue.isEmpty {
                for effect in state.handle(queue.removeFirst()) {
                    switch effect {
                    case .preview, .publish, .loadHistory, .loadAudit: queue += executor.perform(effect)
                    default: break
                    }
                }
            }
        }

        /// Nudges `count` times with `key`; an increase also answers the reason prompt. Returns sorted latencies.
        func run(_ key: Character, count: Int) throws -> [Double] {
            var latencies: [Double] = []
            for _ in 0..<count {
                feed(.snapshot(try source.snapshot()))
                feed(.key(.character(key)))  // preview: the confirm dialog opens
                feed(.key(.tab))  // focus Publish
                if key == "+" {
                    feed(.key(.enter))  // an increase asks for a reason first
                    for c in "bench" { feed(.key(.character(c))) }
                }
                let version = try session.config.current().info.number
                let t0 = Stopwatch.nanoseconds()
                feed(.key(.enter))  // publish through the write path (policies, compare-and-swap, audit)
                let t1 = Stopwatch.nanoseconds()
                guard try session.config.current().info.number == version + 1 else {
                    throw BenchError("the confirmed nudge did not publish a version")
                }
                latencies.append(Double(t1 - t0) / 1e6)
            }
            return latencies.sorted()
        }
        for (key, label) in [("-", "decrease (no policy asked)"), ("+", "increase (guardrail + step-up policies)")] {
            let l = try run(Character(key), count: 300)
            print("  300 confirmed nudges, \(label): each a compare-and-swap publish with its audit record")
            report("keystroke → published, p50", value: l[l.count / 2], unit: "ms", limit: 20, higherIsBetter: false)
            report("keystroke → published, p99", value: l[l.count * 99 / 100], unit: "ms", limit: 20, higherIsBetter: false)
        }
    }
}
