// swift-tools-version:6.0
import PackageDescription

/// rollout: a terminal console for rolling out Firebase App Check with App Attest a percentage at a time.
///
/// Layers: pure core modules (JSON, RemoteConfig, Rollout, Telemetry, StepUp, Console) know no terminal,
/// database, network or wall clock; adapters (SQLiteStore, Terminal, TelemetryIngest, AppCheck's libcrypto use) sit
/// at the edges; the `rollout` executable wires them.
///
/// Release builds reach the metadata of concrete generic types (`[String: Int]`, `Set<CounterKey>`) through
/// metadata accessors that pass the conformances they need, instead of by mangled name: a mangled name is
/// demangled at run time and each conformance it needs is looked up by a scan of every conformance record in
/// the binary, the first time in a process (about a seventh of the instructions of a `rollout nudge`).
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .unsafeFlags(
        ["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"], .when(configuration: .release)),
]

/// Release builds of the executables link libcrypto, libsqlite3, ncurses and libstdc++ statically when `make`
/// has put their archives in .build/static-libs (searched before the system's directories, which hold the shared
/// objects too): the dynamic loader then binds none of their symbols at start-up, which was over half of the
/// instructions of `rollout --help`. Debug and test builds link the shared libraries.
///
/// They also export no symbols (`--no-export-dynamic`, after the `-export-dynamic` swiftc passes): an executable
/// needs none, and with its 11,000 Swift symbols in the dynamic table the loader hashed a larger table and the
/// runtime's start-up `dladdr` (it locates the binary for its backtracer) scanned all of them, about 0.4M
/// instructions and a fifth of a millisecond of every command. Crash backtraces read the full symbol table.
///
/// They are linked by the toolchain's lld with packed relative relocations (`DT_RELR`, glibc 2.36): the binary's
/// 53,700 pointers that the loader moves to where the executable was placed (it stays position-independent, so
/// address randomisation is kept) are listed in 14 kB instead of 1.3 MB of `Elf64_Rela` records, which every
/// command read at start. lld also maps the read-only data apart from the code, not executable.
let staticNativeLibraries: [LinkerSetting] = [
    .unsafeFlags(
        [
            "-L\(Context.packageDirectory)/.build/static-libs", "-Xlinker", "--no-export-dynamic",
            "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
        ],
        .when(configuration: .release))
]

let package = Package(
    name: "rollout",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "rollout", targets: ["rollout"]),
        .executable(name: "rollout-bench", targets: ["rollout-bench"]),
    ],
    targets: [
        // System libraries (Debian: libncurses-dev, libsqlite3-dev, libssl-dev).
        .systemLibrary(name: "CNcurses", path: "Sources/CNcurses"),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL"),
        // The libraries loaded with dlopen on first use are C targets: each one's table of the library's functions
        // is defined once, in its shim.c (see Sources/CPostgres/include/shim.h for why).
        // Debian: libqrencode-dev (the QR code of a step-up enrolment).
        .target(name: "CQRencode", path: "Sources/CQRencode", linkerSettings: [.linkedLibrary("dl")]),
        // Debian: libmicrohttpd-dev (the HTTP/1.1 server of `rollout serve`).
        .target(name: "CMicroHTTPD", path: "Sources/CMicroHTTPD", linkerSettings: [.linkedLibrary("dl")]),
        // Debian: libcurl4-openssl-dev (the Firebase Remote Config REST client).
        .target(name: "CCurl", path: "Sources/CCurl", linkerSettings: [.linkedLibrary("dl")]),
        // Debian: libpq-dev (the PostgreSQL client library of the team store).
        .target(name: "CPostgres", path: "Sources/CPostgres", linkerSettings: [.linkedLibrary("dl")]),
        // Debian: libfido2-dev (FIDO2/CTAP2 security keys: enrolment and assertions of the step-up).
        .target(name: "CFido2", path: "Sources/CFido2", linkerSettings: [.linkedLibrary("dl")]),

        // Pure core.
        // Locks, threads, formatting, streams, paths and child processes on libc (no corelibs Foundation).
        .target(name: "Platform", swiftSettings: strict),
        .target(name: "JSON", dependencies: ["Platform"], swiftSettings: strict),
        .target(name: "Timekeeping", dependencies: ["Platform"], swiftSettings: strict),
        // The one output sanitiser: text from outside escaped for the terminal (CLI output and the console grid).
        .target(name: "Crypto", dependencies: ["Platform", "COpenSSL"], swiftSettings: strict),
        .target(name: "RemoteConfig", dependencies: ["Platform", "JSON", "Crypto"], swiftSettings: strict),
        .target(name: "Rollout", dependencies: ["Platform", "RemoteConfig", "JSON", "Crypto", "Timekeeping"], swiftSettings: strict),
        .target(name: "Telemetry", dependencies: ["Platform", "Timekeeping", "Rollout"], swiftSettings: strict),
        .target(name: "StepUp", dependencies: ["Platform", "Crypto", "CQRencode", "Timekeeping", "Rollout"], swiftSettings: strict),
        .target(name: "AppCheck", dependencies: ["Platform", "Crypto", "COpenSSL", "JSON", "Timekeeping"], swiftSettings: strict),
        .target(name: "Console", dependencies: ["Platform", "RemoteConfig", "Rollout", "Telemetry", "Timekeeping", "RampPlans"], swiftSettings: strict),
        // Ramp plans: the plan file, its state and the one decision of what a plan does next.
        .target(name: "RampPlans", dependencies: ["Platform", "Crypto", "RemoteConfig", "Rollout", "StepUp", "Telemetry", "Timekeeping"], swiftSettings: strict),

        // The one assessment of a rollout (`RolloutMonitor`) and auto-kill, on the core's ports only.
        .target(name: "Monitoring", dependencies: ["Platform", "RemoteConfig", "Rollout", "Telemetry", "Timekeeping"], swiftSettings: strict),

        // What the stores share without knowing each other's database: the store key file (it seals the secrets of
        // the SQLite file and of the PostgreSQL team store). Never a database driver.
        .target(name: "StoreSupport", dependencies: ["Platform", "Crypto", "Rollout"], swiftSettings: strict),

        // Telemetry sources that pull (BigQuery over the GA4 and Crashlytics exports, GA4 realtime, the Crashlytics
        // API), their pure part: the pull plan (watermark, overlap), back-off, and the ledger that turns pulled
        // aggregates into counter batches that never count twice.
        .target(name: "TelemetrySources", dependencies: ["Platform", "JSON", "Timekeeping", "Rollout", "Telemetry"], swiftSettings: strict),

        // Telemetry coming in, at the edge of the pure Telemetry: the row formats (native NDJSON, GA4 and Crashlytics
        // exports) read with JSON's scanner, the line reader with its limits, the recording thread, and the
        // temporary files a large batch spills to (Telemetry's SpillFile port). Used by `rollout ingest`, the
        // exchange server's intake and the benchmarks.
        .target(name: "TelemetryIngest", dependencies: ["Platform", "JSON", "Timekeeping", "Rollout", "Telemetry"], swiftSettings: strict),

        // Adapters: SQLiteStore, PostgresStore, FirebaseRemoteConfig and ExchangeServer never depend on each
        // other (Tests/ArchitectureTests checks it); they share the core's ports and StoreSupport.
        .target(name: "SQLiteStore", dependencies: ["Platform", "CSQLite", "JSON", "Crypto", "RemoteConfig", "Rollout", "Telemetry", "TelemetrySources", "AppCheck", "StepUp", "Timekeeping", "RampPlans", "StoreSupport"], swiftSettings: strict),
        .target(name: "Terminal", dependencies: ["Platform", "CNcurses", "Console"], swiftSettings: strict),
        // The team store on PostgreSQL (`--store postgresql://...`).
        .target(
            name: "PostgresStore",
            dependencies: ["Platform", "CPostgres", "AppCheck", "Crypto", "JSON", "RemoteConfig", "Rollout", "Timekeeping", "StepUp", "Telemetry", "TelemetrySources", "RampPlans", "StoreSupport"],
            swiftSettings: strict),
        .target(
            name: "FleetSimulator", dependencies: ["Platform", "RemoteConfig", "Rollout", "Telemetry", "AppCheck", "Crypto", "Timekeeping"],
            exclude: ["Scenarios"], swiftSettings: strict),
        .target(name: "CommandLineKit", dependencies: ["Platform"], swiftSettings: strict),
        // `rollout serve`: the App Check exchange over HTTP and live telemetry intake, on libmicrohttpd.
        .target(
            name: "ExchangeServer",
            dependencies: ["Platform", "CMicroHTTPD", "AppCheck", "Crypto", "JSON", "Telemetry", "TelemetryIngest", "Timekeeping"],
            swiftSettings: strict),
        // What every client of a web API shares: HTTPS over libcurl (verification on, size limits, retries of lost
        // answers), service-account and command access tokens, and the Google API caller. Adapters that speak to a
        // web service depend on it, never on each other.
        .target(
            name: "WebClient",
            dependencies: ["Platform", "CCurl", "COpenSSL", "Crypto", "JSON", "Timekeeping"],
            swiftSettings: strict),
        // Security keys through libfido2: enrolment and the assertion over a change document (the write path verifies
        // it without the device, in StepUp).
        .target(
            name: "SecurityKey", dependencies: ["Platform", "CFido2", "Crypto", "StepUp", "Timekeeping"],
            swiftSettings: strict),
        // Phone verification (the PIN by SMS, then a voice call): Vonage Verify v2 through WebClient.
        .target(
            name: "PhoneVerification", dependencies: ["Crypto", "JSON", "Platform", "Timekeeping", "WebClient"],
            swiftSettings: strict),
        // Firebase Remote Config as the config store and App Check's services: REST through WebClient.
        .target(
            name: "FirebaseRemoteConfig",
            dependencies: ["Platform", "Crypto", "JSON", "RemoteConfig", "Rollout", "Timekeeping", "WebClient"],
            swiftSettings: strict),
        // Google's data APIs as telemetry sources (BigQuery, the GA4 Data API's realtime reports, the Crashlytics
        // API), through WebClient.
        .target(
            name: "GoogleDataSources",
            dependencies: ["Platform", "JSON", "Rollout", "Telemetry", "TelemetrySources", "Timekeeping", "WebClient"],
            swiftSettings: strict),
        // `rollout store copy`: an SQLite store moved into a PostgreSQL team store. It reads one adapter and writes
        // another, so it sits beside the wiring, not in either adapter.
        .target(
            name: "StoreCopy", dependencies: ["Crypto", "PostgresStore", "Rollout", "SQLiteStore", "StoreSupport", "Telemetry", "Timekeeping"],
            swiftSettings: strict),
        // The application layer: wiring of store, policies, console and simulator (used by the CLI and the benchmarks).
        .target(
            name: "RolloutApp",
            dependencies: [
                "Platform", "CommandLineKit", "Crypto", "RemoteConfig", "Rollout", "Telemetry", "SQLiteStore", "StepUp", "Console", "Terminal", "Timekeeping",
                "Monitoring",
                "FirebaseRemoteConfig",
                "WebClient",
                "PhoneVerification",
                "RampPlans",
                "PostgresStore",
                "StoreCopy",
                "AppCheck",
                "StoreSupport",
                "TelemetrySources",
                "GoogleDataSources",
                "SecurityKey",
            ],
            swiftSettings: strict),
        .target(name: "TestSupport", dependencies: ["FleetSimulator"], path: "Tests/Support", swiftSettings: strict),
        .testTarget(name: "CommandLineKitTests", dependencies: ["CommandLineKit"], swiftSettings: strict),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "TerminalTests", dependencies: ["Terminal", "Console", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "RolloutAppTests", dependencies: ["RolloutApp", "CommandLineKit", "Rollout", "RemoteConfig", "TestSupport", "TelemetrySources", "Timekeeping"],
            swiftSettings: strict),
        .testTarget(
            name: "MonitoringTests",
            dependencies: ["Monitoring", "FleetSimulator", "RemoteConfig", "Rollout", "SQLiteStore", "Telemetry", "TestSupport", "Timekeeping"],
            swiftSettings: strict),
        // The conformance suite of the core's ports, run by every store's tests with its own factory.
        // The strict fake of Firebase Remote Config (a Python program) and its driver, shared by the Firebase tests.
        .target(
            name: "FirebaseFake",
            dependencies: ["TestSupport", "FirebaseRemoteConfig", "WebClient", "JSON", "RemoteConfig", "Rollout", "SQLiteStore", "Timekeeping"],
            path: "Tests/FirebaseFake", exclude: ["fake_remote_config.py", "fake_google_data.py", "google_data_client_check.py", "realtime_client_check.py", "crashlytics_client_check.py", "connect_proxy.py", "appcheck_client_check.py"], swiftSettings: strict),
        // A software FIDO2 authenticator behind libfido2's transport hooks: the real libfido2 path without hardware.
        .target(
            name: "SoftwareAuthenticator", dependencies: ["AppCheck", "CFido2", "Crypto", "Platform"],
            path: "Tests/SoftwareAuthenticator", swiftSettings: strict),
        .target(
            name: "StoreConformance", dependencies: ["Rollout", "RemoteConfig", "StepUp", "Telemetry", "TelemetrySources", "AppCheck", "JSON", "Timekeeping", "RampPlans"],
            path: "Tests/StoreConformance", swiftSettings: strict),

        // Executables.
        .executableTarget(
            name: "rollout",
            dependencies: ["Platform", "CommandLineKit", "RolloutApp", "JSON", "RemoteConfig", "Rollout", "Telemetry", "TelemetryIngest", "TelemetrySources", "AppCheck", "StepUp", "FleetSimulator", "Console", "Terminal", "Timekeeping", "Crypto", "ExchangeServer", "RampPlans", "Monitoring"],
            swiftSettings: strict, linkerSettings: staticNativeLibraries),
        .executableTarget(
            name: "rollout-bench",
            dependencies: ["RolloutApp", "JSON", "RemoteConfig", "Rollout", "Telemetry", "TelemetryIngest", "SQLiteStore", "AppCheck", "StepUp", "FleetSimulator", "Console", "Terminal", "Crypto", "COpenSSL", "CSQLite", "Timekeeping", "ExchangeServer", "Monitoring", "PostgresStore", "StoreSupport", "GoogleDataSources", "TelemetrySources", "WebClient", "FirebaseRemoteConfig", "TestSupport"],
            swiftSettings: strict, linkerSettings: staticNativeLibraries),

        // Tests: one target per module; EndToEnd drives the built binary.
        .testTarget(name: "PlatformTests", dependencies: ["Platform", "JSON", "TestSupport"], swiftSettings: strict),
        // Checks of the layering itself (adapters never depend on each other), on Package.swift and the sources.
        .testTarget(name: "ArchitectureTests", dependencies: ["TestSupport"], swiftSettings: strict),
        .testTarget(name: "TimekeepingTests", dependencies: ["TestSupport", "Timekeeping"], swiftSettings: strict),
        .testTarget(name: "JSONTests", dependencies: ["TestSupport", "JSON"], swiftSettings: strict),
        .testTarget(name: "RemoteConfigTests", dependencies: ["TestSupport", "RemoteConfig", "JSON"], swiftSettings: strict),
        .testTarget(name: "RolloutTests", dependencies: ["TestSupport", "StoreConformance", "Rollout", "RemoteConfig", "JSON", "Timekeeping"], swiftSettings: strict),
        .target(
            name: "TelemetryFixtures", dependencies: ["TestSupport", "Telemetry", "SQLiteStore", "Rollout", "Timekeeping"],
            path: "Tests/TelemetryFixtures", swiftSettings: strict),
        .testTarget(name: "TelemetryTests", dependencies: ["TestSupport", "TelemetryFixtures", "Telemetry", "SQLiteStore", "Rollout", "Timekeeping"], swiftSettings: strict),
        .testTarget(
            name: "TelemetryIngestTests", dependencies: ["TestSupport", "TelemetryFixtures", "TelemetryIngest", "Telemetry", "SQLiteStore", "Rollout", "JSON", "Timekeeping"],
            swiftSettings: strict),
        .testTarget(
            name: "StoreTests",
            dependencies: [
                "TestSupport", "StoreConformance", "StepUp", "SQLiteStore", "Rollout", "RemoteConfig", "Telemetry", "JSON", "Timekeeping",
                "AppCheck", "StoreSupport", "TelemetrySources",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "AppCheckTests", dependencies: ["TestSupport", "AppCheck", "SQLiteStore", "Crypto", "JSON", "Timekeeping"],
            exclude: ["pyattest_verdicts.py", "firebase_admin_tokens.py"], swiftSettings: strict),
        .testTarget(name: "StepUpTests", dependencies: ["TestSupport", "StepUp", "SQLiteStore", "Rollout", "RemoteConfig", "Timekeeping", "Crypto", "SoftwareAuthenticator", "PhoneVerification", "RolloutApp", "PostgresStore", "StoreSupport"], swiftSettings: strict),
        .testTarget(
            name: "SecurityKeyTests",
            dependencies: [
                "TestSupport", "SecurityKey", "SoftwareAuthenticator", "StepUp", "Crypto", "Timekeeping", "AppCheck", "SQLiteStore",
                "Rollout", "RemoteConfig", "RolloutApp",
            ],
            exclude: ["python_fido2_check.py", "python_fido2_client.py"], swiftSettings: strict),
        .testTarget(
            name: "PhoneVerificationTests", dependencies: ["TestSupport", "PhoneVerification", "WebClient"],
            exclude: ["fake_verify.py"], swiftSettings: strict),
        .testTarget(
            name: "FleetSimulatorTests",
            dependencies: [
                "TestSupport", "FleetSimulator", "Telemetry", "Rollout", "RemoteConfig", "AppCheck", "SQLiteStore", "Crypto", "Timekeeping",
                "Monitoring",
            ],
            swiftSettings: strict),
        .testTarget(name: "RampPlansTests", dependencies: ["TestSupport", "RampPlans", "Rollout", "RemoteConfig", "Telemetry", "Timekeeping"], swiftSettings: strict),
        .testTarget(
            name: "RampPlanRunTests",
            dependencies: [
                "TestSupport", "RampPlans", "RolloutApp", "FleetSimulator", "SQLiteStore", "Rollout", "RemoteConfig", "Telemetry", "Timekeeping",
                "Monitoring", "StepUp",
            ],
            swiftSettings: strict),
        .testTarget(name: "ConsoleTests", dependencies: ["TestSupport", "Console", "Rollout", "Telemetry", "Timekeeping", "RampPlans", "RemoteConfig", "RolloutApp", "FleetSimulator", "SQLiteStore"], exclude: ["Golden"], swiftSettings: strict),
        .testTarget(
            name: "ServeTests", dependencies: ["TestSupport", "ExchangeServer", "AppCheck", "SQLiteStore", "Telemetry", "Crypto", "JSON", "Timekeeping", "PostgresStore", "StoreSupport"],
            exclude: ["google_client.py"], swiftSettings: strict),
        .testTarget(
            name: "FirebaseRemoteConfigTests",
            dependencies: [
                "TestSupport", "FirebaseFake", "StoreConformance", "FirebaseRemoteConfig", "WebClient", "SQLiteStore", "Rollout", "RemoteConfig", "JSON",
                "Timekeeping", "PostgresStore",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "PostgresStoreTests",
            dependencies: [
                "TestSupport", "StoreConformance", "PostgresStore", "Rollout", "RemoteConfig", "JSON", "Timekeeping", "SQLiteStore", "StepUp",
                "Telemetry", "Crypto", "RolloutApp", "AppCheck", "StoreSupport", "StoreCopy", "TelemetrySources",
                "SoftwareAuthenticator",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "TestSupport", "StepUp", "Timekeeping", "RolloutApp", "Console", "SQLiteStore", "Telemetry", "Rollout", "RemoteConfig",
                "FirebaseFake", "CommandLineKit", "SoftwareAuthenticator",
            ],
            swiftSettings: strict),
        // The telemetry sources: the pure pull plan and ledger, and BigQuery through WebClient against the strict
        // fake of Google's data APIs (Tests/FirebaseFake/fake_google_data.py).
        .testTarget(
            name: "GoogleDataSourcesTests",
            dependencies: [
                "TestSupport", "FirebaseFake", "GoogleDataSources", "TelemetrySources", "WebClient", "SQLiteStore", "Telemetry",
                "TelemetryIngest", "Rollout", "JSON", "Timekeeping", "RolloutApp",
            ],
            swiftSettings: strict),
        // Every port of a `RolloutSession` on every backend, opened through `Wiring.session`; and every command of
        // the built binary on every backend (the command matrix).
        .testTarget(
            name: "SessionConformanceTests",
            dependencies: [
                "TestSupport", "StoreConformance", "FirebaseFake", "RolloutApp", "CommandLineKit", "PostgresStore", "Rollout",
                "RemoteConfig", "StepUp", "Telemetry", "RampPlans", "AppCheck", "Timekeeping",
            ],
            swiftSettings: strict),
    ]
)
