import Console
import RemoteConfig
import Testing
import Timekeeping

@Suite("Micro-percent text")
struct MicroPercentTests {
    @Test(
        "formats exactly, without rounding or trailing zeros",
        arguments: [
            (12_500_000, "12.5%"), (0, "0%"), (100_000_000, "100%"), (1, "0.000001%"), (10_000_000, "10%"),
            (33_333_333, "33.333333%"), (50_000_010, "50.00001%"), (-2_500_000, "-2.5%"),
        ])
    func format(_ micro: Int64, _ text: String) {
        #expect(PercentText.format(MicroPercent(micro)) == text)
    }

    @Test("points are signed and singular for one point")
    func points() {
        #expect(PercentText.formatPoints(MicroPercent(1_000_000)) == "+1 point")
        #expect(PercentText.formatPoints(MicroPercent(-2_500_000)) == "-2.5 points")
        #expect(PercentText.formatPoints(MicroPercent(100_000)) == "+0.1 points")
    }

    @Test(
        "parses typed values exactly",
        arguments: [
            ("12.5", 12_500_000), ("12.5%", 12_500_000), (" 7 ", 7_000_000), ("0.000001", 1), ("100", 100_000_000),
            (".5", 500_000), ("007.250", 7_250_000), ("100.000000", 100_000_000), ("0", 0),
        ])
    func parse(_ text: String, _ micro: Int64) throws {
        #expect(try PercentText.parse(text) == MicroPercent(micro))
    }

    @Test(
        "refuses what is not an exact percentage",
        arguments: [
            ("", PercentText.ParseError.empty), ("%", .empty), ("abc", .notANumber("abc")),
            ("1e3", .notANumber("1e3")),
            ("-1", .outOfRange("-1")), ("5.", .notANumber("5.")), (".", .notANumber(".")), ("1.2.3", .notANumber("1.2.3")),
            ("0.0000001", .tooPrecise("0.0000001")), ("100.000001", .outOfRange("100.000001")),
            ("1000", .outOfRange("1000")), ("99999999999999999999", .outOfRange("99999999999999999999")),
        ])
    func refuse(_ text: String, _ error: PercentText.ParseError) {
        #expect(throws: error) { try PercentText.parse(text) }
    }

    @Test("format and parse are inverse over the whole range")
    func roundTrip() throws {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2_000 {
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let micro = MicroPercent(Int64(x >> 33) % 100_000_001)
            #expect(try PercentText.parse(PercentText.format(micro)) == micro)
        }
    }
}

@Suite("Numbers, times and text")
struct FormatTests {
    @Test("counts, short counts, shares, rates and points")
    func numbers() {
        #expect(Format.count(1_234_567) == "1,234,567")
        #expect(Format.count(-1_000) == "-1,000")
        #expect(Format.count(999) == "999")
        #expect(Format.shortCount(9_999) == "9,999")
        #expect(Format.shortCount(12_345) == "12.3k")
        #expect(Format.shortCount(123_456) == "123k")
        #expect(Format.shortCount(4_560_000) == "4.56M")
        #expect(Format.shortCount(10_000_000) == "10M")
        #expect(Format.shortCount(2_000_000_000) == "2G")
        #expect(Format.share(0.9812) == "98.1%")
        #expect(Format.share(0.99812, decimals: 3) == "99.812%")
        #expect(Format.roughShare(0.00004) == "<1%")
        #expect(Format.roughShare(0) == "0%")
        #expect(Format.roughShare(0.41) == "41%")
        #expect(Format.rate(0.423) == "0.42")
        #expect(Format.rate(4.23) == "4.2")
        #expect(Format.rate(4_231.6) == "4,232")
        #expect(Format.points(-0.0281, decimals: 3) == "-0.028")
        #expect(Format.points(0.065, decimals: 3) == "+0.065")
        #expect(Format.points(-0.0001, decimals: 2) == "+0.00")
        #expect(Format.fixed(2.5, 0) == "3")
        #expect(Format.fixed(-2.5, 0) == "-3")
        #expect(Format.share(.nan) == "–")
    }

    @Test("times of day, dates, offsets and durations")
    func times() {
        let t = Instant(seconds: 1_780_000_000)
        #expect(Format.time(t) == "20:26:40")
        #expect(Format.time(t, utcOffsetSeconds: 7_200) == "22:26:40")
        #expect(Format.time(t, utcOffsetSeconds: -21 * 3600) == "23:26:40")
        #expect(Format.dateTime(t) == "2026-05-28 20:26:40")
        #expect(Format.utcOffset(0) == "UTC")
        #expect(Format.utcOffset(19_800) == "UTC+05:30")
        #expect(Format.utcOffset(-18_000) == "UTC-05:00")
        #expect(Format.duration(.milliseconds(300)) == "0.3s")
        #expect(Format.duration(.milliseconds(42_000)) == "42s")
        #expect(Format.duration(.milliseconds(192_000)) == "3m12s")
        #expect(Format.duration(.milliseconds(7_500_000)) == "2h05m")
        #expect(Format.duration(.milliseconds(-5)) == "0.0s")
    }

    @Test("truncation and wrapping respect display width")
    func text() {
        #expect(Format.truncate("abcdef", 4) == "abc…")
        #expect(Format.truncate("abc", 4) == "abc")
        #expect(Format.truncate("漢字漢字", 5) == "漢字…")
        #expect(Format.truncateLeading("/a/b/store.db", 9) == "…store.db")
        #expect(Format.pad("ab", 4) == "ab  ")
        #expect(Format.padLeft("ab", 4) == "  ab")
        #expect(Format.wrap("the quick brown fox", 9) == ["the quick", "brown fox"])
        #expect(Format.wrap("supercalifragilistic", 6) == ["super…"])
        #expect(Format.wrap("", 5) == [])
    }
}
