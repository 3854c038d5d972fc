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

    /// Item 5 of "Every door": an import that sets the flag's default to "true" at 5% was judged "5% → 5%" (no
    /// reason, the guardrail let it pass) while every installation evaluated true. The write path now judges it by
    /// what the template does: 5% → 100%, an increase like any other.
    @Test func anImportIsJudgedByItsEffectNotItsPercentageField() throws {
        let f = try Fixture()
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 5))))
        var template = try f.store.current().template.strippingVersionInfo()
        var flag = template.parameter("AppAttestEnabled")!.json.objectValue!
        flag["defaultValue"] = ["value": "true"]
        template.setParameterJSON("AppAttestEnabled", .object(flag))

        var request = WritePath.Request(intent: .importTemplate(template), actor: "ana@example.com", origin: "TEST")
        let preview = try f.path().preview(request)
        #expect(preview.proposal.exposedBefore == MicroPercent(percent: 5))
        #expect(preview.proposal.exposedAfter == .hundred)
        #expect(preview.proposal.increasesExposure)
        #expect(preview.proposal.summary.contains("\"true\" for 5% → 100% of installations"))
        // No reason: refused as any increase is; with one, a policy that refuses increases refuses it too.
        #expect(throws: WritePath.Failure.self) { try f.path().execute(request) }
        request.reason = "import"
        #expect(throws: WritePath.Failure.self) { try f.path([RefuseIncreases()]).execute(request) }
        #expect(try f.store.current().template.parameter("AppAttestEnabled")!.json["defaultValue"]?["value"] == .string("false"))
        // A rollback to such a version is judged the same way.
        guard case .published(let stored, _, _) = try f.path().execute(request) else {
            Issue.record("expected the import to publish without policies")
            return
        }
        _ = try f.path().execute(f.request(.set(MicroPercent(percent: 6))))
        let back = try f.path().preview(
            WritePath.Request(intent: .rollback(toVersion: stored.info.number - 1), actor: "ana@example.com", origin: "TEST"))
        #expect(back.proposal.exposedBefore == .hundred && back.proposal.exposedAfter == MicroPercent(percent: 5))
        #expect(!back.proposal.increasesExposure)
        let forward = try f.path().preview(
            WritePath.Request(intent: .rollback(toVersion: stored.info.number), actor: "ana@example.com", origin: "TEST"))
        #expect(forward.proposal.exposedAfter == .hundred)
    }
    /// An import whose only change is a Firebase Rollout's `rolloutValue` said "no change ... nothing written" and
    /// dropped it: the diff read values through `ParameterValue`, blind to that form.
    @Test func anImportChangingOnlyARolloutValuePublishesIt() throws {
        let f = try Fixture()
        let request = { (template: RemoteConfigTemplate) in
            WritePath.Request(intent: .importTemplate(template), actor: "ana@example.com", reason: "r", origin: "TEST")
        }
        _ = try f.path().execute(request(try TemplateDiffTests.template(rollout: TemplateDiffTests.rolloutValue("true", percent: 10))))
        let raised = try TemplateDiffTests.template(rollout: TemplateDiffTests.rolloutValue("true", percent: 50))
        guard case .published(let stored, let proposal, _) = try f.path().execute(request(raised)) else {
            Issue.record("expected a publish")
            return
        }
        #expect(proposal.diff == ["~ AppAttestEnabled under rollout_1: rollout rollout_1 \"true\" at 10% → rollout rollout_1 \"true\" at 50%"])
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
}
