import JSON

// libFuzzer entry for JSONParser and JSONWriter. Properties: no input traps; an accepted document written
// compact or pretty parses back to the same value, and the written text carries no scalar a terminal acts on.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? JSONParser().parse(bytes) else { return 0 }
    for style in [JSONWriter.Style.compact, .pretty] {
        let text = JSONWriter(style: style).bytes(value)
        precondition((try? JSONParser().parse(text)) == value, "written JSON does not parse back to the same value")
        for scalar in String(decoding: text, as: UTF8.self).unicodeScalars {
            let v = scalar.value
            // Pretty text holds newlines between members; nothing else below U+0020 is ever written raw.
            precondition(v >= 0x20 || (v == 0x0A && style == .pretty), "control character U+\(String(v, radix: 16)) in written JSON")
            precondition(!(0x7F...0x9F).contains(v) && !(0x202A...0x202E).contains(v) && !(0x2066...0x2069).contains(v),
                "U+\(String(v, radix: 16)) written raw")
        }
    }
    return 0
}
