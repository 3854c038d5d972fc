import FirebaseFake
import Foundation
import JSON
import RemoteConfig
import Rollout
import TestSupport
import Testing

/// `rollout --store firebase:PROJECT` driven through the built binary against the strict fake.
@Suite(.serialized)
struct FirebaseCLITests {
    static let ours: Set<String> = ["app_attest_rollout", "app_attest_control", "AppAttestEnabled", "AppAttestCohort"]

    /// Everything of a template that is not the rollout's, as sorted-key JSON bytes (the "byte-for-byte" view).
    static func everythingElse(_ template: Any) throws -> Data {
        guard var t = template as? [String: Any] else { throw TestSupport.Failure("not an object") }
        t["version"] = nil
        t["etag"] = nil
        if let cs = t["conditions"] as? [[String: Any]] {
            t["conditions"] = cs.filter { !ours.contains($0["name"] as? String ?? "") }
        }
        if var ps = t["parameters"] as? [String: Any] {
            for k in ours { ps[k] = nil }
            t["parameters"] = ps
        }
        return try JSONSerialization.data(withJSONObject: t, options: [.sortedKeys])
    }

    static func raw(_ v: JSONValue) throws -> Any { try JSONSerialization.jsonObject(with: Data(v.compactText.utf8)) }

    static func percentage(_ fake: FakeFirebase) throws -> String {
        try fake.json(["status"])["rollout"]?["percentage"]?.stringValue ?? "?"
    }

    // MARK: Adoption and the everyday commands

    /// A project whose AppAttestEnabled something else already serves as "true" (its default, or a condition's
    /// value inside a parameter group) is not adopted: the rollout could not take it away, so a kill would leave it
    /// on. Nothing is published; the message says what to change.
    @Test func aFlagAlreadyServedTrueIsNotAdopted() throws {
        let flagged = [
            #""parameters": {"AppAttestEnabled": {"defaultValue": {"value": "true"}, "valueType": "BOOLEAN"}}"#,
            #""conditions": [{"name": "ios_users", "expression": "device.os == 'ios'"}], "parameterGroups": {"attest": {"parameters": {"AppAttestEnabled": {"defaultValue": {"value": "false"}, "conditionalValues": {"ios_users": {"value": "true"}}, "valueType": "BOOLEAN"}}}}"#,
        ]
        for body in flagged {
            let fake = try FakeFirebase(template: "{" + body + "}")
            let before = try fake.headNumber()
            let adopt = try fake.rollout(["init", "--seed", "rollout-2026"])
            #expect(adopt.status != 0, "\(body): \(adopt.stdout)")
            #expect(adopt.stderr.contains("AppAttestEnabled is already \"true\" for"), "\(adopt.stderr)")
            #expect(adopt.stderr.contains("set those values to \"false\""), "\(adopt.stderr)")
            #expect(try fake.headNumber() == before)
        }
    }

    @Test func adoptionAddsTheRolloutAndTouchesNothingElseThroughEveryChange() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let original = try Self.everythingElse(try JSONSerialization.jsonObject(with: Data(existingTemplate.utf8)))

        let adopt = try fake.rollout(["init", "--seed", "rollout-2026"])
        #expect(adopt.status == 0, "\(adopt.stderr)")
        #expect(try fake.json(["status"])["store"]?.stringValue == "firebase:\(fake.project)")
        #expect(adopt.stdout.contains("version 2 (etag etag-\(fake.projectNumber)-2)"))
        #expect(try fake.headNumber() == 2)
        #expect(try Self.everythingElse(try Self.raw(try fake.head())) == original)
        // The others' conditions keep their order.
        let names = try fake.head()["conditions"]!.arrayValue!.compactMap { $0["name"]?.stringValue }.filter {
            !Self.ours.contains($0)
        }
        #expect(names == ["ios_users", "beta_testers"])

        let again = try fake.rollout(["init", "--seed", "rollout-2026"])
        #expect(again.status == 1)
        #expect(
            again.stderr.contains("the state store of firebase:\(fake.project) already holds its rollout (version 2)"))
        #expect(try fake.headNumber() == 2)

        for change in [["set", "10"], ["nudge", "+2.5"], ["kill"], ["resume"], ["set", "5"]] {
            let r = try fake.rollout(change + ["--reason", "step"])
            #expect(r.status == 0, "\(change): \(r.stderr)")
            #expect(
                try Self.everythingElse(try Self.raw(try fake.head())) == original, "\(change) touched something else")
        }
        #expect(try fake.headNumber() == 7)
        let status = try fake.json(["status"])
        #expect(status["store"]?.stringValue == "firebase:\(fake.project)")
        #expect(status["rollout"]?["percentage"]?.stringValue == "5")
        #expect(status["rollout"]?["state"]?.stringValue == "rolling")
        #expect(status["version"]?["versionNumber"]?.numberValue?.int64 == 7)

        let kill = try fake.rollout(["kill", "--reason", "bad crash rate"])
        #expect(kill.status == 0)
        #expect(try fake.json(["status"])["rollout"]?["state"]?.stringValue == "killed")
        #expect(
            try fake.head()["parameters"]?["AppAttestEnabled"]?["conditionalValues"]?["app_attest_rollout"]?["value"]?
                .stringValue == "false")

        let rollback = try fake.rollout(["rollback", "7", "--reason", "undo the kill"])
        #expect(rollback.status == 0, "\(rollback.stderr)")
        // Published as version 7's template under If-Match: Firebase records an ordinary update.
        #expect(try fake.head()["version"]?["updateType"]?.stringValue == "INCREMENTAL_UPDATE")
        #expect(try fake.head()["version"]?["rollbackSource"] == nil)
        #expect(try fake.stat("rollback") == 0)
        #expect(try Self.percentage(fake) == "5")
        #expect(try Self.everythingElse(try Self.raw(try fake.head())) == original)

        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("audit log intact: 8 records, 8 versions checked"))
        let audit = try fake.rollout(["audit", "show"])
        #expect(audit.stdout.contains("firebase version 9 etag etag-\(fake.projectNumber)-9"))
        #expect(audit.stdout.contains("rollback to 7"), "\(audit.stdout)")
        let history = try fake.json(["history"]).arrayValue ?? []
        #expect(history.first?["updateUser"]?.stringValue == "ana@example.com")
        #expect(
            history.last?["updateUser"]?.stringValue == "console-user@example.com",
            "a version rollout did not publish stays Firebase's")
    }

    /// Before `init` adopted the project, every read (and write) command refuses with the path of the missing
    /// state store and how to adopt, exits 1, and creates nothing: not the state store, not its directory, not
    /// the default one; nothing reaches Firebase's write methods.
    @Test func commandsBeforeInitNameTheMissingStateStoreAndCreateNothing() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let defaultDirectory = fake.directory.appendingPathComponent("xdg/rollout").path
        let defaultPath = defaultDirectory + "/firebase-\(fake.project).db"
        let commands: [[String]] = [
            ["status"], ["status", "--json"], ["status", "--read-only"], ["history"], ["audit", "show"],
            ["audit", "verify"], ["config", "export"], ["diff", "1", "1"], ["nudge", "+1", "--reason", "early"],
        ]
        for command in commands {
            let r = try fake.rollout(command)
            #expect(r.status == 1, "\(command): \(r.status) \(r.stderr)")
            #expect(
                r.stderr.contains("no state store of firebase:\(fake.project) at \(fake.statePath)")
                    && r.stderr.contains("'rollout init --store firebase:\(fake.project)'"), "\(command): \(r.stderr)")
            // Without --state: the per-user default is named, and not created either.
            var env = fake.environment(operator: "ana@example.com")
            env["ROLLOUT_STORE"] = "firebase:\(fake.project)"
            let d = try TestSupport.run(try TestSupport.rolloutBinary(), command, environment: env)
            #expect(
                d.status == 1 && d.stderr.contains("no state store of firebase:\(fake.project) at \(defaultPath)"),
                "\(d.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: fake.statePath))
        #expect(!FileManager.default.fileExists(atPath: defaultDirectory))
        #expect(try fake.stat("publish") == 0 && fake.stat("validate") == 0 && fake.headNumber() == 1)

        // init creates it (at the default path when no --state is given), and then the reads work.
        var env = fake.environment(operator: "ana@example.com")
        env["ROLLOUT_STORE"] = "firebase:\(fake.project)"
        let adopt = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["init", "--seed", "rollout-2026"], environment: env)
        #expect(adopt.status == 0, "\(adopt.stderr)")
        #expect(FileManager.default.fileExists(atPath: defaultPath))
        let status = try TestSupport.run(try TestSupport.rolloutBinary(), ["status", "--read-only"], environment: env)
        #expect(status.status == 0 && status.stdout.contains("firebase:\(fake.project)"), "\(status.stderr)")

        // Read-only reads leave the state store byte for byte as it was, as on the SQLite store.
        let before = try TestSupport.StoreFingerprint.of(defaultPath)
        for command in [["status"], ["history"], ["audit", "show"], ["audit", "verify"], ["config", "export"]] {
            let r = try TestSupport.run(try TestSupport.rolloutBinary(), command + ["--read-only"], environment: env)
            #expect(r.status == 0, "\(command): \(r.stderr)")
        }
        #expect(try TestSupport.StoreFingerprint.of(defaultPath) == before)
    }

    /// A rollback is compare-and-swap like every other write: a kill a colleague publishes between the rollback's
    /// read and its publish is a conflict (exit 3, nothing written, audited as a conflict), never undone by it.
    @Test func aRollbackRacingAColleaguesKillConflictsAndLeavesTheKill() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        #expect(try fake.rollout(["set", "20", "--reason", "more"]).status == 0)
        #expect(try fake.headNumber() == 4)

        var head = try fake.head().objectValue!
        head["version"] = nil
        let kill = try RolloutPlan.apply(.kill, to: RemoteConfigTemplate(json: .object(head)), newSeed: "rollout-2026")
        // The colleague's kill lands just before the rollback reaches Firebase, whichever way it is sent.
        try fake.colleaguePublishes(kill.template.json, before: "publish")
        try fake.colleaguePublishes(kill.template.json, before: "rollback")
        let rollback = try fake.rollout(["rollback", "3", "--reason", "back to 10%"])
        try fake.clearFaults()
        #expect(rollback.status == 3, "\(rollback.stdout)\(rollback.stderr)")
        #expect(rollback.stderr.contains("publish conflict: version 5 by bob@example.com"), "\(rollback.stderr)")
        #expect(try fake.headNumber() == 5, "nothing written on top of the kill")
        #expect(try fake.json(["status"])["rollout"]?["state"]?.stringValue == "killed")
        let last = try #require(try fake.json(["audit", "show", "--limit", "1"]).arrayValue?.first)
        #expect(last["result"]?.stringValue == "conflict", "\(last)")
        #expect(last["action"]?.stringValue == "rollback to 3", "\(last)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    /// Firebase answers in proto3 JSON, which leaves out fields without presence at their default value: an import
    /// carrying `"description": ""`, `"conditionalValues": {}`, an unset enum, is held (and read back) without them,
    /// and is still recognised as the version it made: published, audited, nothing left pending. A `value` of `""`
    /// (a member of a union, which has presence) is kept.
    @Test func anImportWithFieldsAtTheirDefaultIsRecognisedInTheFormFirebaseHoldsIt() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        let exported = try fake.rollout(["config", "export"])
        #expect(exported.status == 0, "\(exported.stderr)")
        var template = try JSONParser().parse(Array(exported.stdout.utf8)).objectValue!
        var parameters = template["parameters"]!.objectValue!
        parameters["Banner"] = [
            "defaultValue": ["value": "hi"], "conditionalValues": [:], "description": "", "valueType": "STRING",
        ]
        parameters["Blank"] = [
            "defaultValue": ["value": ""], "valueType": "PARAMETER_VALUE_TYPE_UNSPECIFIED",
        ]
        template["parameters"] = .object(parameters)
        var conditions = template["conditions"]!.arrayValue!
        conditions.append(
            ["name": "everyone", "expression": "true", "tagColor": "CONDITION_DISPLAY_COLOR_UNSPECIFIED"])
        template["conditions"] = .array(conditions)
        template["parameterGroups"] = .object(JSONObject())
        let file = fake.directory.appendingPathComponent("defaults.json").path
        try JSONValue.object(template).prettyText.write(toFile: file, atomically: true, encoding: .utf8)

        let imported = try fake.rollout(["config", "import", file, "--reason", "add banner"])
        #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")
        #expect(try fake.headNumber() == 4)
        let held = try fake.head()
        #expect(held["parameters"]?["Banner"] == ["defaultValue": ["value": "hi"], "valueType": "STRING"])
        #expect(held["parameters"]?["Blank"] == ["defaultValue": ["value": ""]], "a present empty value is kept")
        #expect(held["conditions"]?.arrayValue?.last == ["name": "everyone", "expression": "true"])
        let last = try #require(try fake.json(["audit", "show", "--limit", "1"]).arrayValue?.first)
        #expect(last["result"]?.stringValue == "published", "\(last)")
        #expect(last["version"]?.numberValue?.int64 == 4, "\(last)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("audit log intact: 3 records, 3 versions checked"), "\(verify.stdout)")
    }

    @Test func aNudgeRacingAColleagueConflictsAndRetryReappliesOnTop() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        func race(_ args: [String], colleague welcome: String) throws -> TestSupport.ProcessResult {
            // Hold the nudge's validation until the colleague has published from the console.
            try fake.fault("delay_before", match: "validate", count: 1, seconds: 1.5)
            nonisolated(unsafe) var result: TestSupport.ProcessResult?
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                result = try? fake.rollout(args)
                done.signal()
            }
            while try fake.stat("faults_pending") > 0 { usleep(20_000) }
            var t = try fake.head()
            t = .object(
                {
                    var o = t.objectValue!; o["version"] = nil; return o
                }())
            var params = t["parameters"]!.objectValue!
            params["welcome_message"] = ["defaultValue": ["value": .string(welcome)], "valueType": "STRING"]
            var doc = t.objectValue!
            doc["parameters"] = .object(params)
            try fake.publishAsColleague(.object(doc), user: "bob@example.com", description: "new greeting")
            done.wait()
            return try #require(result)
        }

        let lost = try race(["nudge", "+1", "--reason", "up"], colleague: "Hello")
        #expect(lost.status == 3, "\(lost.stderr)")
        #expect(lost.stderr.contains("publish conflict: version 4 by bob@example.com"))
        #expect(try fake.headNumber() == 4)
        #expect(try Self.percentage(fake) == "10")

        let won = try race(["nudge", "+1", "--retry", "--reason", "up"], colleague: "Hi there")
        #expect(won.status == 0, "\(won.stderr)")
        #expect(try fake.headNumber() == 6)
        #expect(try Self.percentage(fake) == "11")
        #expect(
            try fake.head()["parameters"]?["welcome_message"]?["defaultValue"]?["value"]?.stringValue == "Hi there",
            "the colleague's change kept")
        let records = try fake.rollout(["audit", "show", "--json"])
        #expect(records.stdout.contains("\"conflict\""))
    }

    @Test func sixProcessesNudgingFortyTimesEachLandExactlyTwentyFourPoints() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        let group = DispatchGroup()
        let lock = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        for p in 0..<6 {
            group.enter()
            DispatchQueue.global().async {
                for i in 0..<40 {
                    do {
                        let r = try fake.rollout(
                            ["nudge", "+0.1", "--retry", "--reason", "ramp \(p)/\(i)"], operator: "op\(p)@example.com")
                        if r.status != 0 { lock.withLock { failures.append("op\(p) #\(i): \(r.status) \(r.stderr)") } }
                    } catch {
                        lock.withLock { failures.append("op\(p) #\(i): \(error)") }
                    }
                }
                group.leave()
            }
        }
        group.wait()
        #expect(failures.isEmpty, "\(failures.prefix(3))")
        #expect(try Self.percentage(fake) == "24")
        // Every publish is one version: the adoption (2) and 240 nudges, nothing applied twice.
        #expect(try fake.headNumber() == 242)
        let versions = try fake.versions()
        #expect(versions.count == 242)
        let verify = try fake.rollout(["audit", "verify", "--json"])
        #expect(verify.status == 0, "\(verify.stderr)")
        let report = try JSONParser().parse(verify.stdout)
        #expect(report["versions"]?.numberValue?.int64 == 241)
        let audit =
            try JSONParser().parse(try fake.rollout(["audit", "show", "--limit", "1000", "--json"]).stdout).arrayValue
            ?? []
        let published = audit.filter { $0["result"]?.stringValue == "published" }.compactMap {
            $0["version"]?.numberValue?.int64
        }
        // Which versions lack a published record, which have two, and every record naming a missing one (a failure
        // under load said only "240 == 241").
        let missing = Set((2...242).map(Int64.init)).subtracting(published).sorted()
        let twice = Dictionary(grouping: published, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        let around = audit.filter { record in
            missing.contains { record["version"]?.numberValue?.int64 == $0 || (record["detail"]?.stringValue ?? "").contains("version \($0)") }
                || record["result"]?.stringValue != "published"
        }.map(\.compactText)
        #expect(Set(published).count == 241, "missing \(missing), twice \(twice); records: \(around.suffix(12))")
        #expect(Set(published) == Set((2...242).map(Int64.init)))

        // History across pages (listVersions pages of 100).
        let listsBefore = try fake.stat("list")
        let history = try fake.json(["history", "--limit", "250"]).arrayValue ?? []
        #expect(history.count == 242)
        #expect(history.compactMap { $0["versionNumber"]?.numberValue?.int64 } == (1...242).reversed().map(Int64.init))
        #expect(try fake.stat("list") - listsBefore >= 3)
        let older = try fake.json(["history", "--limit", "3", "--before", "100"]).arrayValue ?? []
        #expect(older.compactMap { $0["versionNumber"]?.numberValue?.int64 } == [99, 98, 97])
    }

    // MARK: Faults through the binary

    @Test func networkFaultsGiveTheDocumentedBehaviourAndNeverADoublePublish() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let fast = ["ROLLOUT_FIREBASE_TIMEOUT": "1"]
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        var expected = 2
        var percent = 0
        for (fault, seconds, retry) in [
            ("drop_after", 0.0, false), ("drop_before", 0.0, false), ("delay_after", 2.0, false),
            ("unavailable", 0.0, false),
            // With --retry a publish taken for lost would be re-applied on top: settled, it lands once.
            ("drop_after", 0.0, true), ("delay_after", 2.0, true), ("delay_before", 2.0, true),
        ] {
            try fake.fault(fault, match: "publish", count: 1, seconds: seconds)
            let conflicts = try fake.stat("conflict")
            let r = try fake.rollout(
                ["nudge", "+1", "--reason", fault] + (retry ? ["--retry"] : []), environment: fast)
            if fault == "delay_before" {
                // The held request reaches the fake after the publish was settled, and is refused as stale.
                let refused = try TestSupport.eventually(within: 30) { try fake.stat("conflict") > conflicts }
                #expect(refused, "the held request")
            }
            expected += 1
            percent += 1
            #expect(r.status == 0, "\(fault): \(r.stderr)")
            #expect(r.stdout.contains("published version \(expected) "), "\(fault): \(r.stdout)")
            #expect(try fake.stat("faults_pending") == 0)
            #expect(try fake.headNumber() == expected, "\(fault): exactly one version")
            #expect(try Self.percentage(fake) == "\(percent)")
        }
        // 503 then 200 on reads.
        try fake.fault("unavailable", match: "get", count: 2)
        #expect(try fake.rollout(["status"]).status == 0)

        // Firebase down for good: a clear error, nothing published.
        try fake.fault("unavailable", match: "publish", count: 50)
        let down = try fake.rollout(["nudge", "+1", "--reason", "down"], environment: fast)
        #expect(down.status == 1)
        #expect(
            down.stderr.contains("Firebase did not take the publish after 4 attempts (it was not applied"),
            "\(down.stderr)")
        #expect(try fake.headNumber() == expected)
        try fake.control("POST", "/_fake/faults", ["fault": "unavailable", "match": "none", "count": 0])

        // Credentials refused on every call: named as such.
        try fake.fault("unauthenticated", match: "get", count: 1000)
        let refused = try fake.rollout(["status"], environment: fast)
        #expect(refused.status == 1)
        #expect(
            refused.stderr.hasPrefix(
                "rollout: Firebase rejected the credentials (HTTP 401: Request had invalid authentication credentials."),
            "\(refused.stderr)")
    }

    @Test func credentialsStateAndURLMistakesAreOneLineErrors() throws {
        let fake = try FakeFirebase()
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        chmod(fake.keyFile, 0o644)
        let loose = try fake.rollout(["status"])
        #expect(loose.status == 1)
        #expect(loose.stderr.contains("is accessible to group or others (mode 644); run: chmod 600"))
        chmod(fake.keyFile, 0o600)

        let http = try fake.rollout(["status"], environment: ["ROLLOUT_FIREBASE_URL": "http://firebase.example.com"])
        #expect(http.status == 2)
        #expect(http.stderr.contains("plain http to a non-loopback host"))

        let none = try fake.rollout(["status"], environment: ["GOOGLE_APPLICATION_CREDENTIALS": ""])
        #expect(none.status == 2)
        #expect(none.stderr.contains("needs credentials: --credentials FILE"))

        #expect(try fake.rollout(["status"]).status == 0)
        let other = try fake.rollout(["status"], environment: ["ROLLOUT_STORE": "firebase:another-project"])
        #expect(other.status == 1)
        #expect(
            other.stderr.contains("is the state store of firebase:\(fake.project), not of firebase:another-project"))

        let bad = try fake.rollout(["status"], environment: ["ROLLOUT_STORE": "firebase:Bad/Project"])
        #expect(bad.status == 2)

        // The token command instead of a key file.
        let token = fake.directory.appendingPathComponent("token.sh").path
        let mint = "curl -s -d grant_type=x http://127.0.0.1:\(fake.port)/token >/dev/null; exit 7"
        try mint.write(toFile: token, atomically: true, encoding: .utf8)
        let failing = try fake.rollout(["status", "--access-token-command", "sh \(token)"])
        #expect(failing.status == 1)
        #expect(failing.stderr.contains("the access-token command 'sh \(token)' failed (exit 7)"))

        let (publishes, validations) = (try fake.stat("publish"), try fake.stat("validate"))
        let readOnly = try fake.rollout(["nudge", "+1", "--reason", "no", "--read-only"])
        #expect(readOnly.status == 4)
        #expect(try fake.stat("publish") == publishes && fake.stat("validate") == validations)
    }

    // MARK: firebase-admin

    /// The template the fake holds after a nudge, evaluated by firebase-admin 7.7.0 for the 10,000 vector ids.
    @Test func firebaseAdminEvaluatesTheFakesTemplateWithTheExpectedPercentages() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "7.5", "--reason", "ramp"]).status == 0)
        #expect(try fake.rollout(["nudge", "+2.5", "--reason", "ramp"]).status == 0)
        // The rollout's conditions and parameters as the fake holds them (the team's other conditions use
        // device and user-property elements that the server form cannot express), converted to a server template.
        let head = try fake.head()
        var doc = JSONObject()
        doc["conditions"] = .array(
            head["conditions"]!.arrayValue!.filter { Self.ours.contains($0["name"]?.stringValue ?? "") })
        var params = JSONObject()
        for k in ["AppAttestEnabled", "AppAttestCohort"] { params[k] = head["parameters"]![k]! }
        doc["parameters"] = .object(params)
        let server = try RemoteConfigTemplate(json: .object(doc)).converted(to: .server)

        let vectors = try String(
            contentsOf: try TestSupport.vector("remote-config/rollout-2026-10pct.tsv"), encoding: .utf8)
        var ids: [String] = []
        var percentiles: [Int64] = []
        for line in vectors.split(separator: "\n") where !line.hasPrefix("#") {
            let cells = line.split(separator: "\t")
            guard cells.count == 3, let p = Int64(cells[2]) else { continue }
            ids.append(String(cells[0]))
            percentiles.append(p)
        }
        #expect(ids.count == 10_000)
        let dir = fake.directory
        try server.json.prettyText.write(
            to: dir.appendingPathComponent("server.json"), atomically: true, encoding: .utf8)
        try (ids.joined(separator: "\n") + "\n").write(
            to: dir.appendingPathComponent("ids.txt"), atomically: true, encoding: .utf8)
        let peer = try TestSupport.run(
            try TestSupport.python(),
            [
                TestSupport.packageRoot.appendingPathComponent("scripts/rc_peer.py").path,
                dir.appendingPathComponent("server.json").path,
                dir.appendingPathComponent("ids.txt").path, "AppAttestEnabled", "AppAttestCohort",
            ])
        #expect(peer.status == 0, "\(peer.stderr)")
        let lines = peer.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == ids.count)
        var enabled = 0
        var control = 0
        var wrong: [String] = []
        for (i, line) in lines.enumerated() {
            let c = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            let p = percentiles[i]
            let exposed = p <= 10_000_000
            let inControl = p > 50_000_000 && p <= 60_000_000
            if c[0] == "true" { enabled += 1 }
            if c[2] == "control" { control += 1 }
            // firebase-admin reports the template's default values as "remote" too.
            let expectedCohort = exposed ? "enabled" : inControl ? "control" : "none"
            if c != [exposed ? "true" : "false", "remote", expectedCohort, "remote"] {
                wrong.append("\(ids[i]) \(p): \(line)")
            }
        }
        #expect(enabled == 970, "10% of the vectors")
        #expect(control == percentiles.filter { $0 > 50_000_000 && $0 <= 60_000_000 }.count)
        #expect(wrong.count == 0, "\(wrong.count) ids disagree, e.g. \(wrong.prefix(3))")
    }
}

/// A real Firebase project's template, as Firebase's own features write it: a running Firebase Rollout on another
/// parameter keyed by the rollout's id (not listed under `conditions`), an A/B test, a personalization, groups,
/// conditions rollout does not evaluate and members it does not know.
let firebaseWrittenTemplate = """
    {
      "conditions": [
        {"name": "ios_users", "expression": "device.os == 'ios' && app.version.>=(['3.2.0'])", "tagColor": "BLUE"},
        {"name": "signals", "expression": "app.customSignal['tier'].exactlyMatches(['gold'])"}
      ],
      "parameters": {
        "new_checkout": {
          "defaultValue": {"value": "false"},
          "conditionalValues": {
            "rollout_1": {"rolloutValue": {"rolloutId": "rollout_1", "value": "true", "percent": 5}},
            "ios_users": {"value": "false"}
          },
          "valueType": "BOOLEAN"
        },
        "button_color": {
          "defaultValue": {"value": "blue"},
          "conditionalValues": {"experiment_7": {"experimentValue": {"experimentId": "7", "variantValue": [
            {"variantId": "Baseline", "noChange": true}, {"variantId": "Variant A", "value": "green"}]}}},
          "valueType": "STRING"
        },
        "home_layout": {"defaultValue": {"personalizationValue": {"personalizationId": "p-42"}}, "valueType": "STRING",
          "futureMember": {"deep": [1, {"x": null}]}}
      },
      "parameterGroups": {"payments": {"description": "payments", "parameters": {
        "wallet_enabled": {"defaultValue": {"value": "true"}, "valueType": "BOOLEAN",
          "conditionalValues": {"signals": {"value": "false"}}}}}}
    }
    """

extension FirebaseCLITests {
    /// "A real Firebase project", the first step. Reproduction: `rollout init --store firebase:demo-proj` refused
    /// the project's template ("parameter 'new_checkout' has a value for unknown condition 'rollout_1'"), so a team
    /// running a Firebase Rollout on any parameter could not use rollout at all. Adoption now carries every
    /// foreign part through init and every change untouched.
    @Test func aTemplateWithAFirebaseRolloutIsAdoptedAndCarriedThroughEveryChange() throws {
        let fake = try FakeFirebase(template: firebaseWrittenTemplate)
        let original = try Self.everythingElse(try JSONSerialization.jsonObject(with: Data(firebaseWrittenTemplate.utf8)))
        let adopt = try fake.rollout(["init", "--seed", "rollout-2026"])
        #expect(adopt.status == 0, "\(adopt.stderr)")
        #expect(try Self.everythingElse(try Self.raw(try fake.head())) == original)
        for i in 0..<20 {
            let r = try fake.rollout(i % 5 == 4 ? ["nudge", "-0.5"] : ["nudge", "+1", "--reason", "ramp"])
            #expect(r.status == 0, "nudge \(i): \(r.stderr)")
        }
        #expect(try Self.percentage(fake) == "14")
        #expect(try Self.everythingElse(try Self.raw(try fake.head())) == original)
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }
}
