import Console
import Foundation
import Rollout
import RolloutApp
import Testing
import TestSupport
import Timekeeping

/// The console's `:approve REQUEST` as the executor carries it out (`StepUpMethods.approveRequest`): a read-only
/// session is refused like any write, an unknown request is a failure with its reason, and a session that is not a
/// rollout session refuses it; nothing is written and no key is asked in any of them.
struct ConsoleApproveExecutorTests {
    /// A key that must not be reached: every case here is refused before the key is asked.
    static let noKey = ConsoleSecurityKey(device: {
        Issue.record("the key was asked for")
        throw TestSupport.Failure("no key in this test")
    })

    @Test func readOnlyUnknownAndUnsupportedAreRefusedWithNothingWritten() throws {
        let dir = try TestSupport.temporaryDirectory("console-approve")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let clock = ManualClock()
        _ = try Wiring.createStore(path: path, seed: "rollout-console-approve", operatorID: "ana@test", clock: clock)
        func version() throws -> Int {
            try Wiring.session(path: path, operatorID: "ana@test", clock: clock).config.current().info.number
        }
        let before = try version()
        let request = "3f1c9a0b5e7d2c41"

        let reader = try Wiring.session(path: path, operatorID: "bob@test", readOnly: true, clock: clock).rolloutSession()
        let readOnly = StoreConsoleExecutor(session: reader, securityKey: Self.noKey, phone: nil)
        #expect(
            readOnly.perform(.approveRequest(requestID: 7, request: request))
                == [.writeRefused(requestID: 7, .readOnly(.requested))])

        let writer = try Wiring.session(path: path, operatorID: "bob@test", clock: clock)
        let unknown = StoreConsoleExecutor(session: writer.rolloutSession(), securityKey: Self.noKey, phone: nil)
        let answer = unknown.perform(.approveRequest(requestID: 8, request: request))
        guard case .publishFailed(8, let message)? = answer.first, answer.count == 1 else {
            Issue.record("expected a failure, got \(answer)")
            return
        }
        #expect(message.contains("no two-person request \(request)"), "\(message)")

        // A store session without the rollout session's ports: refused, not guessed at.
        let bare = StoreConsoleExecutor(session: writer, securityKey: Self.noKey, phone: nil)
        guard case .publishFailed(9, let why)? = bare.perform(.approveRequest(requestID: 9, request: request)).first else {
            Issue.record("expected a refusal")
            return
        }
        #expect(why.contains("rollout approve \(request)"), "\(why)")
        #expect(try version() == before)
    }
}
