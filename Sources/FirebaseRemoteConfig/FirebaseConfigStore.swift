import Crypto
import Glibc
import Platform
import JSON
import RemoteConfig
import Rollout
import Timekeeping
import WebClient

/// The `ConfigStore` whose templates live in Firebase Remote Config, with the audit log in a state store.
///
/// Firebase keeps the template versions (and only 300 of them, for 90 days); the state store (the port
/// `FirebaseStateStore`: an SQLite `RolloutStore` file, or the PostgreSQL team store) keeps what Firebase does not: the unlimited audit chain, telemetry, operators, step-up
/// and guardrail settings. Each `published` audit record names the Firebase version number and ETag it produced.
///
/// A publish is validated first (`validateOnly=true`), then sent once with `If-Match`. When its answer is lost
/// (timeout, dropped connection, 500/503), the store re-reads the versions the publish could have become (the base
/// version + 1; under `If-Match: *`, any version after the base) and decides from their content whether the
/// publish landed before sending it again, so a publish is never applied twice.
///
/// A rollback is published the same way, as the old version's template (the write path reads it) under `If-Match`
/// of the base: Firebase's `:rollback` takes only a version number, no precondition, and would land on top of a
/// version published meanwhile (a colleague's kill, undone). Firebase then records the version as an ordinary
/// update (`INCREMENTAL_UPDATE`, or `FORCED_UPDATE` under `--force`), not `ROLLBACK`; the audit record says which
/// version it rolled back to.
public final class FirebaseConfigStore: ConfigStore, @unchecked Sendable {
    public let client: RemoteConfigClient
    /// The state store: the audit log (it holds no template versions) and the publish intents.
    public let state: any FirebaseStateStore
    public let clock: any Clock
    private let lock = Lock()
    /// Versions are immutable: read each at most once per process.
    private var versionCache: [Int: StoredTemplate] = [:]
    /// ETag → version number, from reads (a publish needs the number its base had).
    private var numbers: [String: Int] = [:]
    /// How many times a publish whose answer was lost is settled and sent again before giving up.
    public var settleAttempts = 4
    /// Versions asked for per `listVersions` page (Firebase allows 1 to 300).
    public var pageSize = 100
    /// Reads of the newest version within this interval reuse the last one read or published (the console's poll),
    /// and a read after it asks for the newest version's number first, reading the template again only when it
    /// changed; zero (the default, every CLI command): every read fetches the template. A stale read can only cause a conflict,
    /// never a lost update: every publish carries `If-Match`, and conflicts are reported from a fresh read.
    public var pollInterval = Instant.Duration(microseconds: 0)
    private var head: (stored: StoredTemplate, at: Instant)?
    /// Version number → (operator, origin) of the versions this state store's operators published.
    private var publishers: [Int: (actor: String, origin: String)] = [:]
    private var publishersScanned: Int64 = 0

    public init(client: RemoteConfigClient, state: any FirebaseStateStore, clock: any Clock) {
        self.client = client
        self.state = state
        self.clock = clock
    }

    /// `firebase:PROJECT`, as the header and `status` show the store.
    public var label: String { "firebase:" + client.project }

    // MARK: Reading

    public func current() throws -> StoredTemplate {
        guard pollInterval.microseconds > 0, let h = lock.withLock({ head }) else { return try fresh() }
        if clock.now() - h.at < pollInterval { return try attributed(h.stored) }
        // The poll: the newest version's number (`listVersions`, one entry, a few hundred bytes) instead of the
        // whole template. Every publish and rollback makes a new version, so the newest listed is the active one,
        // and versions never change: the same number means the template held is still current.
        if let newest = try client.listVersions(pageSize: 1, pageToken: nil, endVersionNumber: nil).versions.first,
            let number = newest["versionNumber"]?.stringValue.flatMap({ Int($0) }), number == h.stored.info.number
        {
            lock.withLock { if head?.stored.info.number == number { head?.at = clock.now() } }
            return try attributed(h.stored)
        }
        return try fresh()
    }

    /// The newest version as Firebase has it now.
    public func fresh() throws -> StoredTemplate {
        let s = try stored(client.get())
        remember(s)
        return try attributed(s)
    }

    private func remember(_ s: StoredTemplate) {
        let now = clock.now()
        lock.withLock { if head == nil || head!.stored.info.number <= s.info.number { head = (s, now) } }
    }

    /// One version; `PurgedVersion` when Firebase no longer keeps it (older than the oldest it lists), else
    /// `StoreError.noSuchVersion` when there is none.
    public func version(_ number: Int) throws -> StoredTemplate {
        if let s = lock.withLock({ versionCache[number] }) { return try attributed(s) }
        do {
            return try attributed(stored(client.get(version: number)))
        } catch FirebaseError.api(let status, _, _) where status == 404 || status == 400 {
            if number >= 1, let oldest = try oldestKeptVersion(), number < oldest {
                throw PurgedVersion(number: number, oldestKept: oldest)
            }
            throw StoreError.noSuchVersion(number)
        }
    }

    /// The oldest version Firebase still lists (it keeps the newest 300, each for at most 90 days, and always the
    /// active one); nil when it lists none.
    func oldestKeptVersion() throws -> Int? {
        var oldest: Int?
        var token: String?
        var walk = Self.versionPages()
        repeat {
            let page = try client.listVersions(pageSize: 300, pageToken: token, endVersionNumber: nil)
            for v in page.versions {
                if let n = v["versionNumber"]?.stringValue.flatMap({ Int($0) }) { oldest = min(oldest ?? n, n) }
            }
            token = try walk.next(after: page.nextPageToken)
        } while token != nil
        return oldest
    }

    /// `listVersions` pages: Firebase keeps at most 300 versions, so at most 300 pages even of one version each.
    static func versionPages() -> PageWalk { PageWalk("listVersions", maxPages: 300) }

    public func versions(limit: Int, before: Int?) throws -> [VersionInfo] {
        var out: [VersionInfo] = []
        var listed: Set<Int> = []
        var token: String?
        var walk = Self.versionPages()
        let end = before.map { $0 - 1 }
        if let end, end < 1 { return [] }
        repeat {
            let page = try client.listVersions(
                pageSize: min(pageSize, max(1, limit - out.count)), pageToken: token, endVersionNumber: end)
            for v in page.versions {
                var info = try Self.info(v, etag: "")
                // A version listed again (a broken page token): listed once.
                guard listed.insert(info.number).inserted else { continue }
                if let cached = lock.withLock({ versionCache[info.number] }) { info.etag = cached.info.etag }
                info = try attributed(info)
                if let before, info.number >= before { continue }
                out.append(info)
                if out.count == limit { return out }
            }
            token = try walk.next(after: page.nextPageToken)
        } while token != nil
        return out
    }

    // MARK: Publishing

    public func publish(_ request: PublishRequest) throws -> StoredTemplate {
        // Settle what an interrupted process left behind first, so that its record precedes this one.
        try reconcile()
        let ifMatch: String
        let baseNumber: Int
        switch request.ifMatch {
        case .etag(let e):
            ifMatch = e
            if let n = lock.withLock({ numbers[e] }) {
                baseNumber = n
            } else {
                let newest = try fresh()
                guard newest.etag == e else { throw PublishConflict(current: newest, expectedETag: e) }
                baseNumber = newest.info.number
            }
        case .any:
            ifMatch = "*"
            baseNumber = try fresh().info.number
        }
        // Sent in the form Firebase holds it (proto3 JSON), so what is sent, the intent's digest and the version
        // read back are one text.
        let held = Proto3Template.normalized(request.template.strippingVersionInfo().json)
        var body = held.objectValue ?? JSONObject()
        let description = String(request.description.prefix(1024))
        body["version"] = ["description": .string(description)]
        let document = JSONValue.object(body)

        // 1. Validate: Firebase checks the template (and the ETag) without publishing.
        do {
            _ = try client.put(document, ifMatch: ifMatch, validateOnly: true)
        } catch let m as VersionMismatch {
            throw try conflict(expected: ifMatch, m)
        }

        // 2. Record the intent in the state store, committed before anything can land.
        var intent = PublishIntent(
            id: 0, created: clock.now(), host: Self.thisProcess.host, pid: Self.thisProcess.pid, baseNumber: baseNumber,
            ifMatch: ifMatch, contentDigest: SHA256.hex(Array(Self.content(held).utf8)),
            description: description, rollbackSource: nil, origin: request.updateOrigin, audit: request.audit)
        intent.id = try begin(intent)

        // 3. Publish, settling lost answers and answers that are not what Firebase holds.
        var landed: StoredTemplate?
        var attempt = 0
        var lostAnswer = false
        var untrusted: [String] = []
        do {
            while landed == nil {
                attempt += 1
                do {
                    let answer = try client.put(document, ifMatch: ifMatch, validateOnly: false)
                    landed = try stored(confirmed(answer, of: intent))
                } catch let m as VersionMismatch {
                    // A conflict answer may be contradictory (Firebase applied the publish and answered 412 all the
                    // same), or, after a lost answer, our own earlier request that landed late: the version after
                    // the base tells, when it can only be ours. On a first answer it can only be ours when no one
                    // of this state store claims it or raced on the same base (identical publishes of two
                    // operators on one ETag are told apart by their intents, not by their content).
                    if try attempt > 1 || onlyOursCouldFollow(baseNumber, intent: intent.id),
                        case .landed(let f) = try settle(intent)
                    {
                        landed = f
                        break
                    }
                    throw try conflict(expected: ifMatch, m)
                } catch let e where Self.mayHaveLanded(e) {
                    lostAnswer = true
                    if let u = e as? UntrustedAnswer { untrusted.append(u.description) }
                    switch try settle(intent) {
                    case .landed(let f): landed = f
                    case .other(let winner): throw PublishConflict(current: winner, expectedETag: ifMatch)
                    case .notLanded:
                        guard attempt < settleAttempts else {
                            throw FirebaseError.unsettled(
                                "Firebase did not take the publish after \(attempt) attempts (it was not applied; the last: \(e)); try again later"
                            )
                        }
                        client.policySleep(retry: attempt)
                    }
                }
            }
        } catch {
            // A request whose answer was lost may still land, unless a conflict proves its precondition failed for
            // good: then its intent stays for `reconcile`. Otherwise nothing landed and nothing will.
            if !lostAnswer || error is PublishConflict && intent.conditional { try? abandon(intent.id) }
            throw error
        }

        // 4. The audit record, naming the version and ETag, with the intent removed in the same transaction.
        let result = landed!
        remember(result)
        do {
            try complete(
                intent, landed: result.info,
                note: untrusted.isEmpty
                    ? nil
                    : "settled by reading Firebase after an answer that was not what it holds ("
                        + untrusted.joined(separator: "; ") + ")")
        } catch {
            throw StoreError.unavailable(
                "published Firebase version \(result.info.number) (etag \(result.etag)) but could not write its audit record yet (the next command completes it): \(error)"
            )
        }
        return try attributed(result)
    }

    /// `firebase version N etag E origin O`: what a published audit record names (and `verifyIntegrity` checks).
    public static func auditMark(_ info: VersionInfo, origin: String) -> String {
        "firebase version \(info.number) etag \(info.etag) origin \(origin)"
    }

    /// Firebase records every publish of ours as the service account's (`REST_API`); the audit log knows the
    /// operator and the face (`ROLLOUT_CLI`, `ROLLOUT_CONSOLE`, ...). Versions published by this state store's
    /// operators are shown as theirs; every other version as Firebase says.
    private func attributed(_ info: VersionInfo) throws -> VersionInfo {
        let known: (actor: String, origin: String)? = try lock.withLock {
            if let p = publishers[info.number] { return p }
            try scanPublishers()
            return publishers[info.number]
        }
        guard let known else { return info }
        var out = info
        out.updateUser = known.actor
        out.updateOrigin = known.origin
        return out
    }

    /// Reads the audit records appended since the last look (newest first, down to the last one seen) into
    /// `publishers`; the caller holds `lock`.
    private func scanPublishers() throws {
        var before: Int64? = nil
        var newest: Int64 = publishersScanned
        scan: while true {
            let page = try state.auditRecords(limit: 200, before: before)
            for r in page {
                if r.sequence <= publishersScanned { break scan }
                newest = max(newest, r.sequence)
                guard r.entry.result == .published, let v = r.entry.version,
                    let mark = r.entry.detail.range(ofText: "firebase version \(v) etag ")
                else { continue }
                let tail = r.entry.detail[mark.upperBound...]
                let origin =
                    tail.range(ofText: " origin ").map { String(tail[$0.upperBound...].prefix { $0 != ";" }) }
                    ?? "ROLLOUT_CLI"
                publishers[v] = (r.entry.actor, origin)
            }
            guard let last = page.last, page.count == 200 else { break }
            before = last.sequence
        }
        publishersScanned = newest
    }

    /// The Firebase versions that a `published` audit record of this state store names.
    func claimedVersions() throws -> Set<Int> {
        try lock.withLock {
            try scanPublishers()
            return Set(publishers.keys)
        }
    }

    private func attributed(_ s: StoredTemplate) throws -> StoredTemplate {
        StoredTemplate(template: s.template, info: try attributed(s.info))
    }

    enum Settlement {
        case landed(StoredTemplate)
        case notLanded
        case other(StoredTemplate)
    }

    /// After a lost (or untrusted) answer: whether the publish of `intent` landed, read from Firebase's versions with
    /// `landing` (as `reconcile` settles an interrupted publish). A conditional publish found nowhere lost to the
    /// version after its base; a forced one found nowhere has not landed yet.
    private func settle(_ intent: PublishIntent) throws -> Settlement {
        let head = try fresh()
        switch try landing(of: intent, head: head.info.number, claimed: claimedVersions()) {
        case .landed(let v): return .landed(v)
        case .notFound:
            return intent.conditional && head.info.number > intent.baseNumber ? .other(head) : .notLanded
        case .purged(let version, let oldest):
            throw FirebaseError.unsettled(
                "Firebase purged version \(version) (the oldest it keeps is \(oldest)) before the publish was settled; the next command records it as unknown"
            )
        }
    }

    /// Whether a version (its template JSON and version object) is what `intent` published: its content and
    /// description. An intent an older rollout left for a rollback it sent with `:rollback` has no content digest:
    /// Firebase marks the version that rollback made with `updateType` ROLLBACK and the `rollbackSource`.
    static func holds(_ intent: PublishIntent, json: JSONValue, info: VersionInfo) -> Bool {
        guard let digest = intent.contentDigest else {
            guard let source = intent.rollbackSource else { return false }
            return info.updateType == .rollback && info.rollbackSource == source
        }
        return info.description == String(intent.description.prefix(1024))
            && SHA256.hex(Array(content(json).utf8)) == digest
    }

    /// A 200 to a publish answered with something other than what Firebase holds: settled like a lost answer.
    struct UntrustedAnswer: Error, CustomStringConvertible {
        var description: String
    }

    /// The answer to a publish, taken at its word only when it is what Firebase holds: it names, for a conditional
    /// publish, the version after the base (`If-Match` allows no other), holds what was sent (`holds`), and reading
    /// that version back from Firebase gives the same. Anything else (a 200 for a publish not applied, an answer
    /// naming another version) is an `UntrustedAnswer`, settled by reading like a lost answer, so that the audit
    /// record names what Firebase really holds.
    private func confirmed(_ answer: FetchedTemplate, of intent: PublishIntent) throws -> FetchedTemplate {
        let info = answer.json["version"].flatMap { try? Self.info($0, etag: answer.etag) }
        guard let info else {
            throw UntrustedAnswer(description: "Firebase answered 200 without the version it made")
        }
        let named = info.number
        if intent.conditional, named != intent.baseNumber + 1 {
            throw UntrustedAnswer(
                description: "Firebase answered 200 naming version \(named), but a publish on version "
                    + "\(intent.baseNumber) can only become version \(intent.baseNumber + 1)")
        }
        guard Self.holds(intent, json: answer.json, info: info) else {
            throw UntrustedAnswer(
                description: "Firebase answered 200 naming version \(named) with other content than was sent")
        }
        let held: FetchedTemplate
        do {
            held = try client.get(version: named)
        } catch FirebaseError.api(let status, _, _) where status == 404 || status == 400 {
            throw UntrustedAnswer(
                description: "Firebase answered 200 naming version \(named), which it does not hold")
        }
        guard let heldInfo = held.json["version"].flatMap({ try? Self.info($0, etag: held.etag) }),
            Self.holds(intent, json: held.json, info: heldInfo)
        else {
            throw UntrustedAnswer(
                description: "Firebase answered 200 naming version \(named), which holds something else")
        }
        return answer
    }

    /// Whether the version after `base` can only be the publish of `intent`: no audit record claims it and no
    /// other publish of this state store is pending on the same base.
    private func onlyOursCouldFollow(_ base: Int, intent: Int64) throws -> Bool {
        guard try !claimedVersions().contains(base + 1) else { return false }
        return try !pendingIntents().contains { $0.id != intent && $0.baseNumber == base }
    }

    /// Whether a publish that failed this way may have been applied: no answer, an answer that breaks the
    /// protocol (no ETag, not JSON, no version: Firebase may have applied it and a proxy or a bug mangled the
    /// answer), or a server error (a gateway's 502 says nothing about what the server behind it did).
    private static func mayHaveLanded(_ error: Error) -> Bool {
        if error is TransportError || error is UntrustedAnswer { return true }
        if case FirebaseError.protocolViolation = error { return true }
        if case FirebaseError.api(let status, _, _) = error { return status >= 500 }
        return false
    }

    private func conflict(expected: String, _ m: VersionMismatch) throws -> PublishConflict {
        PublishConflict(current: try fresh(), expectedETag: expected)
    }

    /// The parts of a template a publish writes, canonically (member order does not matter) and in the form Firebase
    /// holds them (`Proto3Template`: fields without presence at their default value left out). A missing list or
    /// map is written out empty, as it always was, so the digests of intents older rollouts left still compare.
    package static func content(_ json: JSONValue) -> String {
        let held = Proto3Template.normalized(json)
        let keep: JSONValue = [
            "conditions": held["conditions"] ?? .array([]), "parameters": held["parameters"] ?? .object(JSONObject()),
            "parameterGroups": held["parameterGroups"] ?? .object(JSONObject()),
        ]
        return keep.canonicalText
    }

    // MARK: Audit

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) throws -> AuditRecord { try state.appendAudit(entry) }

    public func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        try state.auditRecords(limit: limit, before: before)
    }

    // MARK: Decoding

    private func stored(_ f: FetchedTemplate) throws -> StoredTemplate {
        guard let versionJSON = f.json["version"] else {
            throw FirebaseError.protocolViolation("Firebase's template has no version object")
        }
        let info = try Self.info(versionJSON, etag: f.etag)
        var template: RemoteConfigTemplate
        do {
            template = try RemoteConfigTemplate(json: f.json)
        } catch {
            throw FirebaseError.protocolViolation("Firebase's template version \(info.number) does not parse: \(error)")
        }
        template.setMember("etag", .string(f.etag))
        let s = StoredTemplate(template: template, info: info)
        lock.withLock {
            versionCache[info.number] = s
            numbers[f.etag] = info.number
        }
        return s
    }

    /// A `Version` object → `VersionInfo`; numbers are strings (numbers tolerated), times RFC 3339 with any
    /// fraction, unknown `updateOrigin`/`updateType` values tolerated.
    package static func info(_ v: JSONValue, etag: String) throws -> VersionInfo {
        let numberText = v["versionNumber"]?.stringValue ?? v["versionNumber"]?.numberValue?.text
        guard let numberText, let number = Int(numberText) else {
            throw FirebaseError.protocolViolation("a Firebase version has no versionNumber")
        }
        let time = v["updateTime"]?.stringValue.flatMap(ISO8601.parse) ?? Instant(microseconds: 0)
        let type: UpdateType =
            switch v["updateType"]?.stringValue {
            case "FORCED_UPDATE": .forced
            case "ROLLBACK": .rollback
            default: .incremental
            }
        let user = v["updateUser"]?["email"]?.stringValue ?? v["updateUser"]?["name"]?.stringValue ?? "unknown"
        return VersionInfo(
            number: number, etag: etag, updateTime: time, updateUser: user,
            updateOrigin: v["updateOrigin"]?.stringValue ?? "REMOTE_CONFIG_UPDATE_ORIGIN_UNSPECIFIED", updateType: type,
            description: v["description"]?.stringValue ?? "",
            rollbackSource: v["rollbackSource"]?.stringValue.flatMap { Int($0) })
    }
}

/// A version Firebase has purged: it keeps the newest 300 versions, each for at most 90 days.
public struct PurgedVersion: Error, Sendable, CustomStringConvertible {
    public let number: Int
    public let oldestKept: Int

    public var description: String {
        "Firebase no longer keeps version \(number): it keeps the newest 300 versions, each for at most 90 days (the oldest it keeps is \(oldestKept))"
    }
}
