import Foundation
import Testing
import Timekeeping

struct ISO8601Tests {
    /// Issue 13: each of these was accepted (2026-02-31 became 3 March).
    @Test(arguments: [
        "2026-02-31T00:00:00Z", "2026-02-29T12:00:00Z", "2026-04-31T00:00:00Z", "2100-02-29T00:00:00Z",
        "2026-05-20T10:00:00+99:99", "2026-05-20T10:00:00+18:01", "2026-05-20T10:00:00-19:00",
        "2026-05-20T10:00:00+05:60", "2026-05-20T23:59:60Z", "2026-05-20 10:00:60 UTC", "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z", "2026-05-00T00:00:00Z", "2026-05-20T24:00:00Z", "2026-05-20T10:60:00Z",
        "2026-05-20T10:00:00", "2026-05-20T10:00:00.Z", "2026-05-20T10:00:00Zjunk", "2026-5-20T10:00:00Z",
        "", "2026-05-20T10:00:00+0100",
    ])
    func refuses(_ text: String) {
        #expect(ISO8601.parse(text) == nil, "\(text)")
        #expect(throws: ISO8601.ParseError.self) { try ISO8601.parseReportingError(text) }
    }

    @Test func reasonsNameTheField() {
        func reason(_ t: String) -> String {
            do {
                _ = try ISO8601.parseReportingError(t)
                return "accepted"
            } catch { return error.reason }
        }
        #expect(reason("2026-02-31T00:00:00Z") == "day 31 does not exist in 2026-02")
        #expect(reason("2026-05-20T10:00:00+99:99") == "offset +99:99 is beyond ±18:00")
        #expect(reason("2026-05-20T23:59:60Z").hasPrefix("second 60"))
    }

    @Test func acceptsValidInstants() throws {
        #expect(ISO8601.parse("2024-02-29T00:00:00Z") == Instant(seconds: 1_709_164_800))
        #expect(ISO8601.parse("2000-02-29T00:00:00Z") == Instant(seconds: 951_782_400))
        #expect(ISO8601.parse("2026-05-20T10:00:00.123456Z")!.microseconds == 1_779_271_200_123_456)
        #expect(ISO8601.parse("2026-05-20 10:00:00.123456 UTC") == ISO8601.parse("2026-05-20T10:00:00.123456Z"))
        #expect(ISO8601.parse("2026-05-20T12:00:00+02:00") == ISO8601.parse("2026-05-20T10:00:00Z"))
        #expect(ISO8601.parse("2026-05-20T00:00:00+18:00") == ISO8601.parse("2026-05-19T06:00:00Z"))
        #expect(ISO8601.parse("2026-05-20T00:00:00-18:00") == ISO8601.parse("2026-05-20T18:00:00Z"))
        #expect(ISO8601.parse("0000-01-01T00:00:00Z") != nil)
        #expect(ISO8601.parse("9999-12-31T23:59:59.999999Z") != nil)
    }

    /// Every day of every month of a 400-year cycle against Foundation's Gregorian calendar.
    @Test func calendarAgreesWithFoundation() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        for year in [1900, 1970, 2000, 2023, 2024, 2100, 2400] {
            for month in 1...12 {
                let date = calendar.date(from: DateComponents(year: year, month: month, day: 1))!
                let days = calendar.range(of: .day, in: .month, for: date)!.count
                #expect(ISO8601.daysInMonth(year: Int64(year), month: Int64(month)) == Int64(days))
                let last = String(format: "%04d-%02d-%02dT00:00:00Z", year, month, days)
                let next = String(format: "%04d-%02d-%02dT00:00:00Z", year, month, days + 1)
                #expect(ISO8601.parse(last).map { Date(timeIntervalSince1970: $0.secondsSince1970) } == calendar.date(from: DateComponents(year: year, month: month, day: days)))
                #expect(ISO8601.parse(next) == nil)
            }
        }
    }

    @Test func formatThenParseIsIdentity() {
        for micros: Int64 in [0, 1_000, 999_000, 1_779_271_200_123_000, -1_000, 253_402_300_799_999_000] {
            let t = Instant(microseconds: micros)
            #expect(ISO8601.parse(t.iso8601) == t)
        }
    }

    @Test func checkedSecondsRefusesOverflow() {
        #expect(Instant(checkedSeconds: 4_611_686_018_427_387_904) == nil)
        #expect(Instant(checkedSeconds: Int64.min) == nil)
        #expect(Instant(checkedSeconds: 1_780_000_000) == Instant(seconds: 1_780_000_000))
    }
}
