import JSON
import RemoteConfig
import Rollout
import Testing
import Timekeeping

struct WritePathTests {
    final class Fixture {
        let clock = ManualClock()
        let store: InMemoryConfigStore
        init() throws {
            store = InMemoryConfigStore(initial: try RolloutPlan.initialTemplate(seed: "s"), time: clock.now())
        }
        func path(_ policies: [WritePolicy] = [], readOnly: Bool = false) -> WritePath {
            WritePath(store: store, clock: clock, policies: policies, readOnly: readOnly, newSeed: { "unused" })
        }
        func request(_ op: RolloutOperation, actor: String = "ana@example.com") -> WritePath.Request {
            WritePath.Request(intent: .rollout(op), actor: actor, reason: "test", origin: "TEST")
        }
        func percentage() throws -> MicroPercent { try RolloutPlan.locate(in: store.current().template)!.percentage }
    }

    struct RefuseIncreases: WritePolicy {
        let name = "test-guardrail"
        func preview(_ p: Proposal) throws -> PolicyReport {
            PolicyReport(policy: name, lines: ["would refuse increases"], decision: try review(p, context: PolicyContext(audit: { _ in })))
        }
        func review(_ p: Proposal, context: PolicyContext) throws -> PolicyDecision {
            p.increasesExposure ? .refuse(PolicyRefusal(policy: name, reason: "verdict HOLD")) : .allow
        }
    }

    @Test func publishCreatesVersionAndChainedAuditRecord() throws {
        let f = try Fixture()
        guard case .published(let stored, let proposal, let attempts) = try f.path().execute(f.request(.set(MicroPercent(percent: 10)))) else {
            Issue.record("expected a publish")
            return
        }
        #expect(stored.info.number == 2 && attempts == 1)
        #expect(stored.info.updateUser == "ana@example.com" && stored.info.description == "test")
        #expect(proposal.summary == "AppAttestEnabled 0% → 10% (+10 points), rolling")
        let audit = try f.store.auditRecords(limit: 10, before: nil)
        #expect(audit.count == 1)
        #expect(audit[0].entry.result == .published && audit[0].entry.version == 2)
        #expect(audit[0].entry.from == "0% (not started)" && audit[0].entry.to == "10%")
        #expect(AuditChain.verify(audit.reversed()) == nil)
    }

    @Test func unchangedWritesNothing() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 10))))
        guard case .unchanged = try f.path().execute(f.request(.set(MicroPercent(percent: 10)))) else {
            Issue.record("expected no change")
            return
        }
        #expect(try f.store.current().info.number == 2)
    }

    @Test func staleETagIsAConflictNamingTheWinner() throws {
        let f = try Fixture()
        let seen = try f.store.current().etag
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 25)), actor: "bob@example.com"))
        var r = f.request(.nudge(MicroPercent(percent: 5)))
        r.basedOnETag = seen
        #expect {
            try f.path().execute(r)
        } throws: { error in
            guard case WritePath.Failure.conflict(let c) = error else { return false }
            return c.winner.number == 2 && c.winner.updateUser == "bob@example.com"
                && c.description.contains("version 2 by bob@example.com") && c.description.contains("0% → 25%")
        }
        #expect(try f.percentage() == MicroPercent(percent: 25))
        #expect(try f.store.auditRecords(limit: 1, before: nil).first?.entry.result == .conflict)
    }

    @Test func policyRefusalIsAuditedAndKillIsNeverAsked() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 10))))
        let guarded = f.path([RefuseIncreases()])
        #expect(throws: WritePath.Failure.self) { try guarded.execute(f.request(.nudge(MicroPercent(percent: 5)))) }
        #expect(try f.store.auditRecords(limit: 1, before: nil).first?.entry.result == .refusedByPolicy)
        #expect(try f.percentage() == MicroPercent(percent: 10))
        // Decreases and kills pass even though the policy would refuse anything it is asked about.
        _ = try guarded.execute(f.request(.nudge(MicroPercent(-2_000_000))))
        _ = try guarded.execute(f.request(.kill))
        #expect(try RolloutPlan.locate(in: f.store.current().template)?.state == .killed)
        // Resume raises exposure again: refused.
        #expect(throws: WritePath.Failure.self) { try guarded.execute(f.request(.resume)) }
    }

    @Test func readOnlyRefusesEvenAKill() throws {
        let f = try Fixture()
        #expect(throws: WritePath.Failure.self) { try f.path(readOnly: true).execute(f.request(.kill)) }
        #expect(try f.store.current().info.number == 1)
        // Nothing at all is written, not even the refusal (a read-only session leaves the store as it found it).
        #expect(try f.store.auditRecords(limit: 10, before: nil).isEmpty)
    }

    @Test func rollbackPublishesTheOldTemplateAsANewVersion() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 10))))
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 30))))
        let r = WritePath.Request(intent: .rollback(toVersion: 2), actor: "ana", reason: "undo", origin: "TEST")
        guard case .published(let stored, _, _) = try f.path().execute(r) else {
            Issue.record("expected a publish")
            return
        }
        #expect(stored.info.number == 4 && stored.info.updateType == .rollback && stored.info.rollbackSource == 2)
        #expect(try f.percentage() == MicroPercent(percent: 10))
        #expect(throws: WritePath.Failure.self) {
            try f.path().execute(WritePath.Request(intent: .rollback(toVersion: 99), actor: "ana", origin: "TEST"))
        }
    }

    @Test func previewWritesNothingAndCarriesPolicyReports() throws {
        let f = try Fixture()
        let preview = try f.path([RefuseIncreases()]).preview(f.request(.set(MicroPercent(percent: 10))))
        #expect(preview.reports.first?.decision == .refuse(PolicyRefusal(policy: "test-guardrail", reason: "verdict HOLD")))
        #expect(!preview.isNoChange)
        #expect(try f.store.current().info.number == 1)
        #expect(try f.store.auditRecords(limit: 10, before: nil).isEmpty)
    }

    @Test func auditChainDetectsEditsAndDeletions() throws {
        let f = try Fixture()
        for n in 1...5 { _ = try f.path().execute(f.request(.set(MicroPercent(percent: Int64(n))))) }
        var records = Array(try f.store.auditRecords(limit: 100, before: nil).reversed())
        #expect(AuditChain.verify(records) == nil)
        var edited = records
        edited[2].entry.reason = "something else"
        #expect(AuditChain.verify(edited)?.sequence == 3)
        records.remove(at: 1)
        #expect(AuditChain.verify(records)?.sequence == 2)
    }

    /// Item 5 of "Every door": an import that sets the flag's default to "true" at 5% was judged "5% → 5%" while
    /// every installation evaluated true. Such an import would also leave the flag on past a kill, so it is now
    /// refused before it is judged (`noPublishLeavesTheFlagOnPastAKill`); a store that already holds such a
    /// version judges a change from it by what it does: from 100%.
    @Test func anImportIsJudgedByItsEffectNotItsPercentageField() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 5))))
        var template = try f.store.current().template.strippingVersionInfo()
        var flag = template.parameter("AppAttestEnabled")!.json.objectValue!
        flag["defaultValue"] = ["value": "true"]
        template.setParameterJSON("AppAttestEnabled", .object(flag))
        let request = WritePath.Request(intent: .importTemplate(template), actor: "ana@example.com", reason: "r", origin: "TEST")
        #expect(throws: WritePath.Failure.self) { try f.path().preview(request) }
        #expect(throws: WritePath.Failure.self) { try f.path().execute(request) }

        let clock = ManualClock()
        let leaky = InMemoryConfigStore(initial: template, time: clock.now())
        let path = WritePath(store: leaky, clock: clock, policies: [], newSeed: { "unused" })
        let down = try path.preview(WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 6))), actor: "a", reason: "r", origin: "T"))
        #expect(down.proposal.exposedBefore == .hundred && down.proposal.exposedAfter == .hundred)
        // The rollout itself arms more (5% → 6%): an increase, whatever else serves "true".
        #expect(down.proposal.increasesExposure)
        #expect(down.proposal.summary.contains("\"true\" for 100% → 100% of installations"), "\(down.proposal.summary)")
    }
    /// An import whose only change is a Firebase Rollout's `rolloutValue` said "no change ... nothing written" and
    /// dropped it: the diff read values through `ParameterValue`, blind to that form.
    @Test func anImportChangingOnlyARolloutValuePublishesIt() throws {
        let f = try Fixture()
        let request = { (template: RemoteConfigTemplate) in
            WritePath.Request(intent: .importTemplate(template), actor: "ana@example.com", reason: "r", origin: "TEST")
        }
        // "false": a Firebase Rollout serving "true" beside ours would stay on past a kill, which no publish may do.
        _ = try f.path().execute(request(try TemplateDiffTests.template(rollout: TemplateDiffTests.rolloutValue("false", percent: 10))))
        let raised = try TemplateDiffTests.template(rollout: TemplateDiffTests.rolloutValue("false", percent: 50))
        guard case .published(let stored, let proposal, _) = try f.path().execute(request(raised)) else {
            Issue.record("expected a publish")
            return
        }
        #expect(proposal.diff == ["~ AppAttestEnabled under rollout_1: rollout rollout_1 \"false\" at 10% → rollout rollout_1 \"false\" at 50%"])
        #expect(stored.template.parameter("AppAttestEnabled")?.json["conditionalValues"]?["rollout_1"]?["rolloutValue"]?["percent"] == 50)
    }
    /// A BOOLEAN's value other than "true"/"false" was refused only in `value`: a `rolloutValue` of "yes" (which
    /// the SDKs read as true) was accepted and counted as false, so raising exposure to 100% read as a decrease.
    @Test func aBooleanValueIsExactlyTrueOrFalseInEveryForm() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 5))))
        let forms: [(JSONValue, String)] = [
            (TemplateDiffTests.rolloutValue("yes", percent: 100), "rollout_1.rolloutValue.value"),
            (["experimentValue": ["experimentId": "e1", "variantValue": [["variantId": "a", "value": "1"]]]],
             "rollout_1.experimentValue.variantValue[0].value"),
        ]
        for (value, path) in forms {
            let request = WritePath.Request(
                intent: .importTemplate(try TemplateDiffTests.template(rollout: value)), actor: "ana@example.com", reason: "r",
                origin: "TEST")
            #expect {
                try f.path().preview(request)
            } throws: { error in
                guard case WritePath.Failure.invalid(let m) = error else { return false }
                return m.contains("$.parameters.AppAttestEnabled.conditionalValues.\(path): AppAttestEnabled is BOOLEAN")
            }
        }
        #expect(try f.store.current().info.number == 2)
    }

    /// A second `AppAttestEnabled` in a parameter group (which the exposure check and the evaluator never read) is
    /// refused at the publish, naming both places.
    @Test func aParameterRepeatedInAGroupIsRefused() throws {
        let f = try Fixture()
        var json = try f.store.current().template.json.objectValue!
        json["parameterGroups"] = ["g": ["parameters": ["AppAttestEnabled": ["defaultValue": ["value": "true"]]]]]
        let request = WritePath.Request(
            intent: .importTemplate(try RemoteConfigTemplate(json: .object(json))), actor: "ana@example.com", reason: "r",
            origin: "TEST")
        #expect {
            try f.path().execute(request)
        } throws: { error in
            guard case WritePath.Failure.invalid(let m) = error else { return false }
            return m.contains("parameter 'AppAttestEnabled' appears more than once (at the top level, in parameter group 'g')")
        }
        #expect(try f.store.current().info.number == 1)
    }

    /// `--dry-run` answered "would publish" where the real run was refused: the preview skipped the etag's
    /// compare-and-swap and the reason an increase needs, which only `execute` checked. Both now meet them alike.
    @Test func aPreviewMeetsTheChecksTheRealRunMakesBeforeAnyPolicy() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 5))))
        var noReason = f.request(.set(MicroPercent(percent: 10)))
        noReason.reason = ""
        let preview = try f.path().preview(noReason)
        #expect(preview.missingReason?.reason == "an increase of exposure needs a reason")
        #expect {
            try f.path().execute(noReason)
        } throws: { error in
            guard case WritePath.Failure.refused(let r) = error else { return false }
            return r == preview.missingReason
        }
        #expect(try f.path().preview(f.request(.set(MicroPercent(percent: 10)))).missingReason == nil)
        noReason.intent = .rollout(.set(MicroPercent(percent: 1)))
        #expect(try f.path().preview(noReason).missingReason == nil, "a decrease needs no reason")

        // A stale etag: the preview is the same conflict, and records nothing.
        let audited = try f.store.auditRecords(limit: 100, before: nil).count
        var stale = f.request(.set(MicroPercent(percent: 6)))
        stale.basedOnETag = "etag-seen-before"
        for run in [{ _ = try f.path().preview(stale) }, { _ = try f.path().execute(stale) }] as [() throws -> Void] {
            #expect {
                try run()
            } throws: { error in
                guard case WritePath.Failure.conflict(let c) = error else { return false }
                return c.winner.number == 2
            }
        }
        let records = try f.store.auditRecords(limit: 100, before: nil)
        #expect(records.count == audited + 1, "the real run's conflict is audited, the preview's is not")
        #expect(records.first?.entry.result == .conflict)
        #expect(try f.store.current().info.number == 2)
    }

    // MARK: Judged by effect, on both bounds

    /// Percentile 99,999,999 is the last there is: `set 99.999999` exposes every installation and is judged as
    /// reaching 100%. Before, it was judged 90% → 99.999999% and skipped reach-100 and the two-person rule.
    @Test func setting99_999999IsJudgedAsReachingEveryone() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 90))))
        let preview = try f.path().preview(f.request(.set(MicroPercent(99_999_999))))
        #expect(preview.proposal.exposedBefore == MicroPercent(percent: 90))
        #expect(preview.proposal.exposedAfter == .hundred)
        #expect(preview.proposal.effectAfter == Exposure(certain: .hundred, possible: .hundred))
        #expect(preview.proposal.summary == "AppAttestEnabled 90% → 99.999999% (+9.999999 points)")
    }

    /// A store holding a condition that may serve "true" to everyone (`app.id`, here) before the rollout's:
    /// the possible share is 100% before and after, and a 10% → 100% `set` was judged no increase (the guardrail
    /// called it a decrease). It is judged on the certain share, which rises: 10% → 100%.
    @Test func aConditionThatMayServeTrueHidesNoIncrease() throws {
        let clock = ManualClock()
        var t = try RolloutPlan.apply(.set(MicroPercent(percent: 10)), to: RolloutPlan.initialTemplate(seed: "s"), newSeed: "s").template
        try t.insertCondition(name: "app", node: .opaque(OpaqueTerm(source: .expression("app.id == 'x'"))), at: 0)
        t.setConditionalValue("AppAttestEnabled", condition: "app", to: "true")
        let store = InMemoryConfigStore(initial: t, time: clock.now())
        let path = { (p: [WritePolicy]) in WritePath(store: store, clock: clock, policies: p, newSeed: { "unused" }) }
        let up = WritePath.Request(intent: .rollout(.set(.hundred)), actor: "ana@example.com", reason: "r", origin: "TEST")
        let preview = try path([]).preview(up)
        #expect(preview.proposal.effectBefore?.possible == .hundred)
        #expect(preview.proposal.increasesExposure)
        #expect(!preview.proposal.onlyReducesExposure)
        #expect((preview.proposal.exposedBefore, preview.proposal.exposedAfter) == (MicroPercent(percent: 10), .hundred))
        #expect(preview.proposal.summary.contains("at least 10%, at most 100% → 100%"), "\(preview.proposal.summary)")
        #expect(throws: WritePath.Failure.self) { try path([RefuseIncreases()]).execute(up) }
        // A decrease is still one.
        _ = try path([]).execute(up)
        let down = try path([]).preview(WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 20))), actor: "a", origin: "T"))
        #expect(!down.proposal.increasesExposure && down.proposal.onlyReducesExposure)
    }

    /// The rule `init` applies (a flag something else serves as "true" stays on past a kill) holds for every
    /// publish: an import or rollback that would leave the flag on past a kill is refused with init's words and
    /// writes nothing. Before, such an import published and a later kill left 90% on while status said "nobody".
    /// A version stored before the rule still takes a kill.
    @Test func noPublishLeavesTheFlagOnPastAKill() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 10))))
        var template = try f.store.current().template.strippingVersionInfo()
        var flag = template.parameter("AppAttestEnabled")!.json.objectValue!
        flag["defaultValue"] = ["value": "true"]
        template.setParameterJSON("AppAttestEnabled", .object(flag))
        let version = try f.store.current().info.number
        let request = WritePath.Request(intent: .importTemplate(template), actor: "ana@example.com", reason: "r", origin: "TEST")
        for attempt in [{ try f.path().preview(request) as Any }, { try f.path().execute(request) as Any }] {
            #expect {
                _ = try attempt()
            } throws: { error in
                guard case WritePath.Failure.plan(.notSetUp(let m)) = error else { return false }
                return m.contains("AppAttestEnabled is already \"true\" for") && m.contains("set those values to \"false\"")
            }
        }
        #expect(try f.store.current().info.number == version)

        // A store that holds such a version (written before the rule): kill still publishes, and set too.
        let clock = ManualClock()
        let leaky = InMemoryConfigStore(initial: template, time: clock.now())
        let path = WritePath(store: leaky, clock: clock, policies: [], newSeed: { "unused" })
        guard case .published = try path.execute(WritePath.Request(intent: .rollout(.kill), actor: "a", origin: "T")) else {
            Issue.record("a kill must publish")
            return
        }
        let plan = try #require(try RolloutPlan.locate(in: leaky.current().template))
        #expect(RolloutPlan.servedPastKill(try leaky.current().template, seed: plan.seed) == Exposure(certain: MicroPercent(89_999_999), possible: MicroPercent(89_999_999)))
    }

    /// A store that lets another operator publish once, between the read and the first publish.
    final class RacedStore: ConfigStore, @unchecked Sendable {
        let inner: InMemoryConfigStore
        var rival: PublishRequest?
        init(_ inner: InMemoryConfigStore) { self.inner = inner }
        func current() throws -> StoredTemplate { try inner.current() }
        func publish(_ request: PublishRequest) throws -> StoredTemplate {
            if let r = rival {
                rival = nil
                _ = try inner.publish(r)
            }
            return try inner.publish(request)
        }
        func versions(limit: Int, before: Int?) throws -> [VersionInfo] { try inner.versions(limit: limit, before: before) }
        func version(_ number: Int) throws -> StoredTemplate { try inner.version(number) }
        func appendAudit(_ entry: AuditEntry) throws -> AuditRecord { try inner.appendAudit(entry) }
        func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] { try inner.auditRecords(limit: limit, before: before) }
    }

    /// A single-use code, accepted once per request like the step-up policy's (`context.stepUpVerified`).
    struct CodeOnce: WritePolicy {
        let name = "step-up"
        func preview(_ p: Proposal) throws -> PolicyReport { PolicyReport(policy: name, lines: [], decision: .allow) }
        func review(_ p: Proposal, context: PolicyContext) throws -> PolicyDecision {
            if context.stepUpVerified { return .allow }
            guard p.stepUpCode == "123456" else { return .refuse(PolicyRefusal(policy: name, reason: "a code", needsStepUpCode: true)) }
            context.stepUpVerified = true
            return .allow
        }
    }

    /// `nudge --retry` re-applies the nudge on the newer version: a code given for 45% → 55% kept its
    /// verification and published 90% → 100%. A verification now carries over only to the same judged change;
    /// otherwise the retry is refused (a fresh code is needed), audited, and nothing is written.
    @Test func aRetryKeepsAVerificationOnlyForTheSameChange() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 45))))
        let raced = RacedStore(f.store)
        let path = WritePath(store: raced, clock: f.clock, policies: [CodeOnce()], newSeed: { "unused" })
        var request = f.request(.nudge(MicroPercent(percent: 10)))
        request.retryOnConflict = true
        request.stepUpCode = "123456"
        let base = try f.store.current()
        let rival = try RolloutPlan.apply(.set(MicroPercent(percent: 90)), to: base.template.strippingVersionInfo(), newSeed: "s")
        raced.rival = PublishRequest(
            template: rival.template, ifMatch: .etag(base.etag), updateUser: "bob@example.com", updateOrigin: "TEST",
            updateType: .incremental, description: "", time: f.clock.now(),
            audit: AuditEntry(time: f.clock.now(), actor: "bob@example.com", action: "set 90", result: .published, detail: ""))
        #expect {
            try path.execute(request)
        } throws: { error in
            guard case WritePath.Failure.refused(let r) = error else { return false }
            return r.needsStepUpCode && r.reason.contains("nudge 90% → 100%") && r.reason.contains("nudge 45% → 55%")
        }
        #expect(try f.percentage() == MicroPercent(percent: 90))
        #expect(try f.store.auditRecords(limit: 1, before: nil).first?.entry.result == .refusedByPolicy)

        // The same judged change on the newer base keeps it: another field changed, the rollout did not.
        let same = RacedStore(f.store)
        let now = try f.store.current()
        var other = now.template.strippingVersionInfo()
        other.setParameterJSON("Unrelated", ["defaultValue": ["value": "x"], "valueType": "STRING"])
        same.rival = PublishRequest(
            template: other, ifMatch: .etag(now.etag), updateUser: "bob@example.com", updateOrigin: "TEST",
            updateType: .incremental, description: "", time: f.clock.now(),
            audit: AuditEntry(time: f.clock.now(), actor: "bob@example.com", action: "edit", result: .published, detail: ""))
        var down = f.request(.nudge(MicroPercent(percent: 5)))
        down.retryOnConflict = true
        down.stepUpCode = "123456"
        guard case .published(_, _, let attempts) = try WritePath(store: same, clock: f.clock, policies: [CodeOnce()], newSeed: { "unused" }).execute(down)
        else {
            Issue.record("expected a publish")
            return
        }
        #expect(attempts == 2)
        #expect(try f.percentage() == MicroPercent(percent: 95))
    }

}
