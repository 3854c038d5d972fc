import Timekeeping

// libFuzzer entry for the one ISO 8601 parser. Properties: no trap; an accepted text names a real calendar
// instant (formatting it and parsing the result gives it back, to the millisecond the format keeps), and
// `parse` and `parseReportingError` agree.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let reported = try? ISO8601.parseReportingError(text)
    let t = ISO8601.parse(text)
    precondition(t == reported, "parse and parseReportingError disagree")
    guard let t else { return 0 }
    let formatted = t.iso8601
    let back = ISO8601.parse(formatted)
    var truncated = t.microseconds - ((t.microseconds % 1_000) + 1_000) % 1_000
    if truncated > t.microseconds { truncated -= 1_000 }
    precondition(back?.microseconds == truncated, "\(text) -> \(formatted) does not parse back")
    let bytes = Array(text.utf8)
    let (y, m, d) = (Int64(bytes[0...3].reduce(0) { $0 * 10 + Int($1 - 48) }), Int64((bytes[5] - 48) * 10 + bytes[6] - 48), Int64((bytes[8] - 48) * 10 + bytes[9] - 48))
    precondition(m >= 1 && m <= 12 && d >= 1 && d <= ISO8601.daysInMonth(year: y, month: m), "accepted an invalid date")
    return 0
}
