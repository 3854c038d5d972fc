import JSON

// libFuzzer entry comparing JSONScanner (the ingest's fast path) with JSONParser, the one JSON
// grammar. Properties: both accept or both reject; when both accept, the scanner's decoded values (written
// back with JSONWriter's spelling) equal JSONParser's tree written compact; under DuplicateKeyPolicy.count
// the scanner accepts what the strict scanner accepts and also documents whose only fault is a repeated name.
nonisolated(unsafe) private let strictNames = MemberNames(policy: .reject)
nonisolated(unsafe) private let countingNames = MemberNames(policy: .count)

private func scan(_ bytes: UnsafeRawBufferPointer, _ names: MemberNames) -> [UInt8]? {
    var s = JSONScanner(bytes, names: names)
    var out: [UInt8] = []
    do throws(LineError) {
        try s.canonicalText(into: &out)
        try s.finish()
        return out
    } catch {
        return nil
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    let parsed: JSONValue?
    var parserError: JSONError?
    do {
        parsed = try JSONParser().parse(bytes: raw)
    } catch {
        parsed = nil
        parserError = error
    }
    let scanned = scan(raw, strictNames)
    switch (parsed, scanned) {
    case (let value?, let text?):
        precondition(JSONWriter().bytes(value) == text, "JSONScanner and JSONParser decode different values")
    case (nil, nil): break
    case (.some, nil): preconditionFailure("JSONScanner rejects what JSONParser accepts")
    case (nil, .some): preconditionFailure("JSONScanner accepts what JSONParser rejects: \(parserError!)")
    }
    countingNames.resetFindings()
    let counted = scan(raw, countingNames)
    if scanned != nil {
        precondition(counted == scanned && countingNames.duplicates == 0, "the counting scanner differs without duplicates")
    } else if counted != nil {
        precondition(countingNames.duplicates > 0, "the counting scanner accepts a bad document")
        precondition(parserError!.message.hasPrefix("duplicate member name"), "duplicates aside, JSONParser rejects it")
    }
    return 0
}
