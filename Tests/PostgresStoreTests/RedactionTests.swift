import PostgresStore
import Testing

/// `PostgresConfigStore.redacted` hides a connection string's password in messages. It was two regular
/// expressions; it is now a scan (the program no longer links the regex engine), checked here against the same
/// expressions.
struct RedactionTests {
    static func byRegex(_ s: String) -> String {
        s.replacing(#/:[^:@\/]*@/#, with: ":***@").replacing(#/password=\S*/#, with: "password=***")
    }

    @Test func theScanAgreesWithTheExpressionsItReplaced() {
        let cases = [
            "postgresql://rollout:s3cret@db.example:5432/rollout", "postgresql://rollout@db/rollout",
            "postgresql://:pw@host/db", "postgres://u:p@h1,u2:p2@h2/db", "host=/tmp port=5432 password=hunter2 user=x",
            "password=", "password=a\tb password=c\nd", "dbname=x", "", ":@", "::@", "a:b/c@d", "a:b:c@d", "user:pa ss@h",
            "postgresql://u:pässwörd@h/db", "x password=ü y", "passwordpassword=1", "password=1:2@3",
        ]
        for c in cases {
            #expect(PostgresConfigStore.redacted(c) == Self.byRegex(c), "\(c.debugDescription)")
        }
        #expect(PostgresConfigStore.redacted("postgresql://rollout:s3cret@db/rollout") == "postgresql://rollout:***@db/rollout")
        #expect(PostgresConfigStore.redacted("host=h password=hunter2 user=u") == "host=h password=*** user=u")
    }

    @Test func randomStringsAgreeToo() {
        var g = SystemRandomNumberGenerator()
        let alphabet = Array(":@/ =\tpasword12é")
        for _ in 0..<3000 {
            let s = String((0..<Int.random(in: 0...24, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
            #expect(PostgresConfigStore.redacted(s) == Self.byRegex(s), "\(s.debugDescription)")
        }
    }
}
