import SecurityKey
import SoftwareAuthenticator
import StepUp
import Testing
import Timekeeping

/// The console's Esc on "touch your security key": a request abandoned before it reached the key never reaches
/// it, and the timeout is handed to libfido2.
@Suite("Security keys: cancellation and timeout")
struct SecurityKeyCancellationTests {
    @Test("a cancelled approval never asks the key; an uncancelled one with a timeout does")
    func cancelledBeforeTheKey() throws {
        let key = SoftwareAuthenticator()
        let device = SecurityKeyDevice(name: key.path) { key.open($0) }
        let credential = try SecurityKeyClient.enrol(
            try OperatorID("ana@laptop"), relyingParty: SecurityKeyTests.rp, device: device, pin: nil, at: SecurityKeyTests.now)
        let enrolled = key.commands
        let cancellation = SecurityKeyCancellation()
        cancellation.cancel()
        #expect(cancellation.isCancelled)
        #expect(throws: SecurityKeyError.self) {
            _ = try SecurityKeyClient.approve(
                SecurityKeyTests.document(), with: credential, device: device, pin: nil, timeoutMilliseconds: 30_000,
                cancellation: cancellation)
        }
        #expect(!key.commands.contains(0x02), "no getAssertion after a cancel: \(key.commands)")
        #expect(key.signCount == credential.signCount)

        let assertion = try SecurityKeyClient.approve(
            SecurityKeyTests.document(), with: credential, device: device, pin: nil, timeoutMilliseconds: 30_000,
            cancellation: SecurityKeyCancellation())
        #expect(key.commands.count > enrolled.count && key.commands.last == 0x02)
        #expect(!assertion.signature.isEmpty)
    }

}
