import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// Where a simulated fleet's devices get their App Check tokens.
public enum FleetExchange: Sendable {
    /// An exchange in the simulating process, with its own demo authority, in simulated time.
    case inProcess
    /// A server reached over HTTP (`rollout serve`), which must trust `authority` for `appId`.
    case remote(RemoteFleetExchange)
}

/// A server the devices attest and assert against: its API, the demo authority it trusts (the devices' keys are
/// certified by it, as Apple certifies real ones), the app the devices are, and the wall clock their credential
/// certificates start at.
public struct RemoteFleetExchange: Sendable {
    public var exchange: any AppAttestExchanging
    public var authority: DemoCertificateAuthority
    public var appId: String
    public var identity: AppIdentity
    public var environment: AppAttestEnvironment
    public var wall: any Clock

    public init(
        exchange: any AppAttestExchanging, authority: DemoCertificateAuthority, appId: String, identity: AppIdentity,
        environment: AppAttestEnvironment, wall: any Clock
    ) {
        self.exchange = exchange
        self.authority = authority
        self.appId = appId
        self.identity = identity
        self.environment = environment
        self.wall = wall
    }
}
