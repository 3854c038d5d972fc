import Foundation
@testable import PostgresStore
import Rollout
import RolloutApp
import StepUp
import SQLiteStore
import StoreConformance
import StoreCopy
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// Ramp plans on a real PostgreSQL server: the plan port's conformance suite (the checks the SQLite store runs),
/// `store copy` of a plan and its pre-approval, and the built binary's `plan` commands: a runner advancing a step
/// with `audit verify` intact, runners racing on one store, `--read-only`, and step-up on a plan step.
@Suite(.serialized)
struct PostgresRampPlansTests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-plans")
        key = directory.appendingPathComponent("team.key").path
    }

    func rollout(_ arguments: [String], store: String?, faketime: String? = nil) throws -> TestSupport.ProcessResult {
        let binary = try TestSupport.rolloutBinary()
        let command = arguments + (store.map { ["--store", $0] } ?? [])
        return try TestSupport.run(
            binary, command, environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"],
            fakeTime: faketime)
    }

    func planFile(_ name: String, _ text: String) throws -> String {
        let path = directory.appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A new PostgreSQL store made by `rollout init`; its socket URI.
    func initialized(_ seed: String) throws -> String {
        let server = try PostgresServer.get()
        let conninfo = server.uris(of: try server.freshDatabase()).socket
        let r = try rollout(["init", "--seed", seed], store: conninfo)
        try #require(r.status == 0, "\(r.stderr)")
        return conninfo
    }

    /// The versions published by a plan runner, oldest first.
    func planVersions(_ conninfo: String) throws -> [VersionInfo] {
        try PostgresConfigStore(conninfo: conninfo).versions(limit: 100, before: nil).filter {
            $0.updateOrigin == RampPlanRunner.origin
        }
        .reversed()
    }

    // MARK: The port

    @Test(arguments: RampPlanStoreConformance.checks.map(\.name))
    func conformance(_ check: String) throws {
        let factory: RampPlanStoreConformance.Factory = {
            let (_, conninfo) = try PostgresStoreTests.freshStore()
            return RampPlanStoreConformance.Fixture(
                open: {
                    let store = try PostgresConfigStore(conninfo: conninfo)
                    return (PostgresRampPlans(store: store), store)
                },
                openReadOnly: { PostgresRampPlans(store: try PostgresConfigStore(conninfo: conninfo, readOnly: true)) })
        }
        try RampPlanStoreConformance.checks.first { $0.name == check }!.run(factory)
    }

    /// `store copy` moves the plan as it is (state, revision, so its id) and its pre-approval, still in force.
    @Test func storeCopyMovesThePlanAndItsPreApproval() throws {
        let path = directory.appendingPathComponent("plan.db").path
        let session = try Wiring.createStore(path: path, seed: "pg-plan-copy", operatorID: "ana@test")
        let file = SQLiteRampPlans(store: session.store)
        _ = try RampPlanStates(session: session).start(
            source: "name copied\nstep 5% hold 1h\nstep 50%\n", actor: "ana@test")
        var row = try #require(try file.loadPlan())
        row.reached = 1
        row.reachedAt = Instant(seconds: 1_780_000_100)
        row.reason = "step 1"
        #expect(try file.compareAndSwapPlanState(row))
        let stored = try #require(try file.loadPlan())
        let approval = StepUpPreApproval(
            plan: RampPlanTable.planID(stored), planName: "copied", approvedBy: "ana@test",
            steps: [.init(step: 2, from: 5_000_000, to: 50_000_000)], grantedAt: Instant(seconds: 1_780_000_000),
            expiresAt: Instant(seconds: 1_780_086_400))
        try file.savePlanApproval(approval)
        _ = try session.store.verify()

        let conninfo = try PostgresServer.get().freshDatabase()
        let report = try PostgresStoreCopy.copy(
            from: try RolloutStore(path: path, create: false), to: conninfo, teamKey: { nil })
        #expect(report.plan == "copied")
        #expect(report.skipped.isEmpty, "\(report.skipped)")
        let team = PostgresRampPlans(store: try PostgresConfigStore(conninfo: conninfo))
        #expect(try team.loadPlan() == stored)
        #expect(try team.planApproval() == approval)
        #expect(try team.activePreApproval() == approval)
        // The copied plan goes on there: its next change of state is a compare-and-swap on the copied revision.
        var next = stored
        next.phase = "paused"
        #expect(try team.compareAndSwapPlanState(next))
        #expect(try team.loadPlan()?.revision == stored.revision + 1)
    }

    /// The console on a PostgreSQL store shows the plan's panel and its `x` key pauses and resumes the plan there
    /// (audited); a read-only console shows the panel and its `x` is refused with nothing written.
    @Test func theConsoleShowsAndControlsThePlanOnPostgreSQL() throws {
        let conninfo = try initialized("pg-plan-console")
        let team = try Wiring.teamSession(conninfo: conninfo, operatorID: "ana@test", keyPath: key)
        _ = try RampPlanStates(session: team.planSession).start(
            source: "name panel\nstep 5% hold 1h\nstep 10%\n", actor: "ana@test")
        let source = try PostgresConsoleSource(team: team, conninfo: conninfo, project: "test", fallback: 0)
        let panel = try #require(try source.snapshot().plan)
        #expect(panel.name == "panel" && panel.phase == .running && panel.reached == 0, "\(panel)")
        #expect(panel.next.contains("step 1 (5%)"), "\(panel.next)")

        let viewer = try Wiring.teamSession(conninfo: conninfo, operatorID: "viewer@test", readOnly: true, keyPath: key)
        let viewerSource = try PostgresConsoleSource(team: viewer, conninfo: conninfo, project: "test", fallback: 0)
        #expect(try viewerSource.snapshot().plan?.name == "panel")
        let auditBefore = try team.config.auditRecords(limit: 1000, before: nil).count
        let refused = StoreConsoleExecutor(session: viewer).perform(.planControl(pause: true))
        guard case .planControlled(_, let wasRefused)? = refused.first else { Issue.record("\(refused)"); return }
        #expect(wasRefused)
        #expect(try team.config.auditRecords(limit: 1000, before: nil).count == auditBefore)

        let executor = StoreConsoleExecutor(session: team)
        let paused = executor.perform(.planControl(pause: true))
        guard case .planControlled(let message, let pauseRefused)? = paused.first else {
            Issue.record("\(paused)"); return
        }
        #expect(!pauseRefused, "\(message)")
        #expect(try source.snapshot().plan?.phase == .paused)
        _ = executor.perform(.planControl(pause: false))
        #expect(try RampPlanStates(session: team.planSession).load()?.state.phase == .running)
        let actions = try team.config.auditRecords(limit: 1000, before: nil).map(\.entry.action)
        #expect(actions.contains("plan pause") && actions.contains("plan resume"), "\(actions)")
    }

    /// The documented grants: the viewer role reads the plan and is refused its writes by the server; the writer
    /// starts and changes it.
    @Test func theViewerRoleReadsThePlanAndTheWriterChangesIt() throws {
        let (owner, conninfo) = try PostgresStoreTests.freshStore()
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        let writerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")
        let viewerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer")
        // Every write of the executable's sessions seals the store with the team store key.
        if try StoreKey.load(key) == nil { _ = try StoreKey.create(key) }
        let writer = try Wiring.teamSession(conninfo: writerInfo, operatorID: "ana@test", keyPath: key)
        let started = try RampPlanStates(session: writer.planSession).start(
            source: "name roles\nstep 5% hold 1h\n", actor: "ana@test")
        _ = try RampPlanStates(session: writer.planSession).operatorChange(
            to: .paused, actor: "ana@test", reason: "roles")
        // The viewer connects writable (no --read-only): the server itself refuses.
        let viewer = PostgresRampPlans(store: try PostgresConfigStore(conninfo: viewerInfo))
        let seen = try #require(try viewer.loadPlan())
        #expect(seen.name == "roles" && seen.phase == "paused" && seen.revision == started.row.revision + 1)
        var next = seen
        next.phase = "aborted"
        #expect { _ = try viewer.compareAndSwapPlanState(next) } throws: { "\($0)".contains("permission denied") }
        #expect { try viewer.revokePlanApproval() } throws: { "\($0)".contains("permission denied") }
        #expect(try PostgresRampPlans(store: owner).loadPlan() == seen)
    }

    // MARK: The binary

    /// `plan start` → `plan run` publishes step 1 through the write path on PostgreSQL (the plan step as the reason),
    /// the operator changes are audited, `--read-only` refuses every write, and `audit verify` holds.
    @Test func startRunPauseResumeAbortOnPostgreSQL() throws {
        let conninfo = try initialized("pg-plan-cli")
        let plan = try planFile("ramp.plan", "name ramp\ngate users 10\nstep 5% hold 1h\nstep 10%\n")
        let missing = try rollout(["plan", "status"], store: conninfo)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no plan was started in this store"), "\(missing.stderr)")

        let started = try rollout(["plan", "start", plan], store: conninfo)
        #expect(started.status == 0, "\(started.stderr)")
        #expect(started.stdout.contains("plan 'ramp' started: 5% → 10%"), "\(started.stdout)")
        #expect(try rollout(["plan", "start", plan], store: conninfo).stderr.contains("abort it first"))
        let status = try rollout(["plan", "status", "--json", "--read-only"], store: conninfo)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("\"phase\":\"running\""), "\(status.stdout)")
        #expect(status.stdout.contains("\"action\":\"advance\""), "\(status.stdout)")

        // Read-only: refused (exit 4), nothing written.
        let before = try PostgresConfigStore(conninfo: conninfo).auditRecords(limit: 1000, before: nil).count
        #expect(try rollout(["plan", "run", "--looks", "1", "--read-only"], store: conninfo).status == 4)
        #expect(try rollout(["plan", "pause", "--read-only"], store: conninfo).status == 4)
        #expect(try rollout(["plan", "abort", "--read-only"], store: conninfo).status == 4)
        #expect(try rollout(["plan", "start", plan, "--read-only"], store: conninfo).status == 4)
        #expect(try PostgresConfigStore(conninfo: conninfo).auditRecords(limit: 1000, before: nil).count == before)
        #expect(try planVersions(conninfo).isEmpty)

        let run = try rollout(["plan", "run", "--looks", "1", "--json"], store: conninfo)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("published version 2: plan 'ramp' step 1/2: 5%"), "\(run.stdout)")
        #expect(try planVersions(conninfo).map(\.number) == [2])
        #expect(try planVersions(conninfo).first?.description == "plan 'ramp' step 1/2: 5%")

        #expect(try rollout(["plan", "pause", "--reason", "lunch"], store: conninfo).status == 0)
        #expect(try rollout(["plan", "pause"], store: conninfo).stderr.contains("paused already"))
        #expect(
            try rollout(["plan", "run", "--looks", "3", "--interval", "0.01", "--exit-on-pause"], store: conninfo)
                .status == 9)
        #expect(try rollout(["plan", "resume"], store: conninfo).status == 0)
        let text = try rollout(["plan", "status"], store: conninfo).stdout
        #expect(text.contains("now  step 1/2: 5% hold 1h"), "\(text)")
        #expect(text.contains("next: waiting:"), "\(text)")
        #expect(try rollout(["plan", "abort", "--reason", "enough"], store: conninfo).status == 0)
        #expect(try rollout(["plan", "run", "--looks", "1"], store: conninfo).status == 8)

        let actions = try PostgresConfigStore(conninfo: conninfo).auditRecords(limit: 1000, before: nil).map(
            \.entry.action)
        for action in ["plan start", "plan pause", "plan resume", "plan abort"] {
            #expect(actions.contains(action), "\(action): \(actions)")
        }
        let verify = try rollout(["audit", "verify"], store: conninfo)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
    }

    /// `store copy` through the binary: a plan running on a file goes on at its step on PostgreSQL, both ends verify.
    @Test func storeCopyTakesARunningPlanAlong() throws {
        let file = directory.appendingPathComponent("moving.db").path
        #expect(try rollout(["init", "--seed", "pg-plan-move"], store: file).status == 0)
        let plan = try planFile("move.plan", "name move\nstep 5% hold 1h\nstep 10%\n")
        #expect(try rollout(["plan", "start", plan], store: file).status == 0)
        let first = try rollout(["plan", "run", "--looks", "1"], store: file)
        #expect(first.stdout.contains("published version 2"), "\(first.stdout) \(first.stderr)")
        let before = try rollout(["plan", "status", "--json"], store: file).stdout

        let target = try PostgresServer.get().freshDatabase()
        let uri = try PostgresServer.get().uris(of: target).socket
        let copy = try rollout(["store", "copy", "--from", file, "--to", uri, "--quiet"], store: nil)
        #expect(copy.status == 0, "\(copy.stderr)")
        #expect(copy.stdout.contains("ramp plan: 'move'"), "\(copy.stdout)")
        #expect(!copy.stdout.contains("not copied"), "\(copy.stdout)")
        let after = try rollout(["plan", "status", "--json"], store: uri)
        #expect(after.status == 0, "\(after.stderr)")
        for field in ["\"plan\":\"move\"", "\"phase\":\"running\"", "\"step\":1"] {
            #expect(before.contains(field) && after.stdout.contains(field), "\(field): \(before) / \(after.stdout)")
        }
        // The runner on PostgreSQL goes on from step 1: it waits for the hold and publishes nothing.
        #expect(try rollout(["plan", "run", "--looks", "1"], store: uri).status == 0)
        #expect(try PostgresConfigStore(conninfo: target).current().info.number == 2)
        #expect(try rollout(["audit", "verify"], store: file).status == 0)
        #expect(try rollout(["audit", "verify"], store: uri).status == 0)
    }

    /// Runners on several machines share one plan: processes started at once on one PostgreSQL store publish its
    /// step exactly once (the plan's compare-and-swap and the write path's), every round.
    @Test func racingRunnersAdvanceAStepOnce() throws {
        let conninfo = try initialized("pg-plan-race")
        let plan = try planFile("race.plan", "name race\nstep 5% hold 1h\nstep 10%\n")
        #expect(try rollout(["plan", "start", plan], store: conninfo).status == 0)
        let runners = 4
        // The start line: the test holds the chain-head row lock, so every runner reads the plan at step 0 and
        // then queues for the write transaction; they are let go together once all of them wait.
        let gate = try PGConnection(conninfo)
        try gate.execute("BEGIN")
        try gate.query("SELECT version FROM config_head WHERE id = 1 FOR UPDATE")
        let results = Results<TestSupport.ProcessResult>()
        // One thread per process (concurrentPerform would run only as many at once as there are cores).
        let group = DispatchGroup()
        for _ in 0..<runners {
            group.enter()
            Thread {
                results.add(Result { try rollout(["plan", "run", "--looks", "1"], store: conninfo) })
                group.leave()
            }.start()
        }
        let watcher = try PGConnection(conninfo)
        var waiting = 0
        for _ in 0..<600 where waiting < runners {
            waiting =
                Int(
                    try watcher.query(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    ).first?.first.flatMap { $0 } ?? "0") ?? 0
            if waiting < runners { usleep(20_000) }
        }
        #expect(waiting == runners, "\(waiting) of \(runners) runners reached the lock")
        try gate.execute("COMMIT")
        group.wait()
        let finished = try results.all.map { try $0.get() }
        #expect(finished.map(\.status) == Array(repeating: 0, count: runners), "\(finished.map(\.stderr))")
        let published = finished.filter { $0.stdout.contains("published version") }
        #expect(published.count == 1, "\(finished.map(\.stdout))")
        #expect(try planVersions(conninfo).map(\.number) == [2])
        let stored = try #require(try PostgresRampPlans(store: try PostgresConfigStore(conninfo: conninfo)).loadPlan())
        #expect(stored.reached == 1 && stored.phase == "running", "\(stored)")
        #expect(try rollout(["audit", "verify"], store: conninfo).status == 0)
        let lost = finished.filter {
            $0.stdout.contains("another runner changed the plan first") || $0.stdout.contains("lost the race")
        }
        #expect(lost.count == runners - 1, "\(finished.map(\.stdout))")
        print("racing runners: \(published.count) published, \(lost.count) lost the race")
    }

    /// In process: six runners, each on its own connection, look at once, over several rounds of a fresh plan each:
    /// every round exactly one publishes and the plan records that one step.
    @Test func racingRunnerObjectsAdvanceOncePerRound() throws {
        let conninfo = try initialized("pg-plan-race-objects")
        let sessions = try (0..<6).map { i in
            try Wiring.teamSession(conninfo: conninfo, operatorID: "runner\(i)@test", clock: SystemClock(), keyPath: key).planSession
        }
        // Each runner is used by one thread at a time (its own connection), as in its own process.
        let runners = Unchecked(try sessions.map { try RampPlanRunner(session: $0) })
        for round in 1...4 {
            _ = try RampPlanStates(session: sessions[0]).start(
                source: "name round\(round)\nstep \(round * 5)% hold 1h\nstep 90%\n", actor: "ana@test")
            let looks = Results<RampPlanRunner.Look?>()
            let group = DispatchGroup()
            for i in runners.value.indices {
                group.enter()
                Thread {
                    looks.add(Result { try runners.value[i].look() })
                    group.leave()
                }.start()
            }
            group.wait()
            let published = try looks.all.compactMap { try $0.get()?.published }
            #expect(published.count == 1, "round \(round): \(published)")
            let stored = try #require(try RampPlanStates(session: sessions[0]).load())
            #expect(stored.state.reached == 1, "round \(round): \(stored.state)")
            _ = try RampPlanStates(session: sessions[0]).operatorChange(
                to: .aborted, actor: "ana@test", reason: "next round")
        }
        #expect(try planVersions(conninfo).count == 4)
        _ = try PostgresConfigStore(conninfo: conninfo).verify()
    }

    /// A plan paused after a runner read it and before its write transaction publishes nothing: the runner's look
    /// checks the plan's revision inside the transaction of its publish (the version it judged is unchanged, so
    /// the write path's compare-and-swap alone would have let the step through).
    @Test func aPlanPausedWhileTheRunnerDecidesPublishesNothing() throws {
        let conninfo = try initialized("pg-plan-interleave")
        let session = try Wiring.teamSession(conninfo: conninfo, operatorID: "runner@test", keyPath: key).planSession
        _ = try RampPlanStates(session: session).start(
            source: "name interleave\nstep 5% hold 1h\nstep 10%\n", actor: "ana@test")
        let runner = Unchecked(try RampPlanRunner(session: session))
        // The operator's `plan pause`: a transaction of its own store under the head lock (which checks and renews
        // the seal), held until the runner waits for that lock.
        let gate = try PostgresConfigStore(conninfo: conninfo, sealing: try Wiring.teamSealing(keyPath: key))
        let look = Results<RampPlanRunner.Look?>()
        let done = DispatchSemaphore(value: 0)
        try gate.atomically {
            Thread {
                look.add(Result { try runner.value.look() })
                done.signal()
            }.start()
            let watcher = try PGConnection(conninfo)
            var waiting = 0
            for _ in 0..<500 where waiting == 0 {
                waiting =
                    Int(
                        try watcher.query(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        ).first?.first.flatMap { $0 } ?? "0") ?? 0
                if waiting == 0 { usleep(20_000) }
            }
            #expect(waiting == 1, "the runner never reached its write transaction")
            // An operator's pause lands first (as `plan pause` would, under the head lock).
            try gate.connection.query("UPDATE ramp_plan SET phase = 'paused', reason = 'paused meanwhile', revision = revision + 1")
        }
        done.wait()
        let result = try #require(try look.all.first?.get())
        #expect(result.published == nil, "\(String(describing: result.done))")
        #expect(
            result.done?.contains("another runner changed the plan first") == true, "\(String(describing: result.done))"
        )
        #expect(try planVersions(conninfo).isEmpty)
        #expect(try RampPlanStates(session: session).load()?.state.phase == .paused)
    }

    /// With step-up on (an operator enrolled), a plan step on PostgreSQL asks for the code as on SQLite: the runner
    /// pauses at the protected step, `plan resume --code` publishes it; a plan started with `--code` is pre-approved
    /// and its runner publishes the protected step with no operator.
    @Test func aProtectedPlanStepAsksForTheCode() throws {
        let conninfo = try initialized("pg-plan-stepup")
        let enrol = try rollout(["operator", "enroll", "--qr", "none"], store: conninfo)
        try #require(enrol.status == 0, "\(enrol.stderr)")
        let uri = try #require(enrol.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = try #require(uri.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(base32)))
        let step = TOTP.standard.step(at: SystemClock().now())
        let confirmed = try rollout(
            ["operator", "enroll", "--code", TOTP.standard.code(secret: secret, step: step)], store: conninfo)
        try #require(confirmed.status == 0, "\(confirmed.stderr)")

        // 0% → 30% is an increase of more than 10 points: protected by the standard policy.
        let plan = try planFile("protected.plan", "name protected\nstep 30% hold 1h\nstep 40%\n")
        #expect(try rollout(["plan", "start", plan], store: conninfo).status == 0)
        let run = try rollout(["plan", "run", "--looks", "1", "--exit-on-pause"], store: conninfo)
        #expect(run.status == 9, "\(run.stdout) \(run.stderr)")
        #expect(run.stdout.contains("needs a one-time code"), "\(run.stdout)")
        #expect(try planVersions(conninfo).isEmpty)
        let wrong = try rollout(["plan", "resume", "--code", "000000"], store: conninfo)
        #expect(wrong.status == 4, "\(wrong.stdout) \(wrong.stderr)")
        #expect(try planVersions(conninfo).isEmpty)
        let resumed = try rollout(
            ["plan", "resume", "--code", TOTP.standard.code(secret: secret, step: step + 1)], store: conninfo)
        #expect(resumed.status == 0, "\(resumed.stdout) \(resumed.stderr)")
        #expect(resumed.stdout.contains("published version 2: plan 'protected' step 1/2: 30%"), "\(resumed.stdout)")
        #expect(try planVersions(conninfo).map(\.number) == [2])

        // Pre-approval at start: 30% → 50% (20 points) is protected; the code is checked once, at start.
        #expect(try rollout(["plan", "abort", "--reason", "next"], store: conninfo).status == 0)
        let second = try planFile("approved.plan", "name approved\nstep 50% hold 1h\nstep 55%\n")
        let approved = try rollout(
            [
                "plan", "start", second, "--code", TOTP.standard.code(secret: secret, step: step + 2), "--approve-for",
                "2h",
            ],
            store: conninfo, faketime: "+30s")
        #expect(approved.status == 0, "\(approved.stdout) \(approved.stderr)")
        #expect(approved.stdout.contains("pre-approved by ana@test"), "\(approved.stdout)")
        #expect(approved.stdout.contains(": steps 1 (30% -> 50%)"), "\(approved.stdout)")
        let auto = try rollout(["plan", "run", "--looks", "1"], store: conninfo)
        #expect(auto.status == 0, "\(auto.stdout) \(auto.stderr)")
        #expect(auto.stdout.contains("published version 3: plan 'approved' step 1/2: 50%"), "\(auto.stdout)")
        let records = try PostgresConfigStore(conninfo: conninfo).auditRecords(limit: 1000, before: nil)
        #expect(records.contains { $0.entry.action == "plan pre-approve" })
        #expect(records.contains { $0.entry.detail.contains("result pre-approved") }, "\(records.map(\.entry.detail))")
        #expect(try rollout(["audit", "verify"], store: conninfo).status == 0)
    }
}

final class Results<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Result<T, any Error>] = []
    func add(_ r: Result<T, any Error>) { lock.withLock { items.append(r) } }
    var all: [Result<T, any Error>] { lock.withLock { items } }
}

final class Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
