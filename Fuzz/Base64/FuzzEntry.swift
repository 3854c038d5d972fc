// libFuzzer entry for the one Base64 decoder (Sources/Crypto/Encoding.swift). Built by build.sh with the Crypto
// sources in the same module. The first byte picks the property; the rest is its input:
//   0 decode(encode(x)) == x for every spelling (standard/URL-safe, padded or not), under the options that
//     allow that spelling
//   1 decoding arbitrary text never traps and accepts only canonical text: encode(decode(s)) == s in the
//     spelling s uses, under each of the options (.anySpelling, .jwt, .standard); a text with both alphabets'
//     characters is never accepted
// Seeds are real inputs: the attestations, keyIds, challenges and tokens of the vectors, base64 as sent.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    if data[0] % 2 == 0 {
        for url in [false, true] {
            for padded in [false, true] {
                let text = Base64.encode(input, urlSafe: url, padded: padded)
                precondition(Base64.decode(text) == input, "round trip (any spelling) failed")
                if url && !padded { precondition(Base64.decode(text, .jwt) == input, "round trip (jwt) failed") }
                if !url && padded {
                    precondition(Base64.decode(text, .standard) == input, "round trip (standard) failed")
                }
            }
        }
        precondition(Base64.encodeURL(input) == Base64.encode(input, urlSafe: true, padded: false))
    } else {
        let text = String(decoding: input, as: UTF8.self)
        let u = Array(text.utf8)
        let url = u.contains(UInt8(ascii: "-")) || u.contains(UInt8(ascii: "_"))
        let standard = u.contains(UInt8(ascii: "+")) || u.contains(UInt8(ascii: "/"))
        let padded = u.contains(UInt8(ascii: "="))
        for options in [Base64.Options.anySpelling, .jwt, .standard] {
            guard let bytes = Base64.decode(text, options) else { continue }
            precondition(!(url && standard), "a text mixing both alphabets was accepted")
            precondition(
                Base64.encode(bytes, urlSafe: url, padded: padded) == text, "a non-canonical text was accepted")
            if options == .jwt { precondition(!standard && !padded, "jwt accepted padding or the standard alphabet") }
            if options == .standard {
                precondition(!url && (padded || u.count % 4 == 0), "standard accepted the URL-safe or no padding")
            }
        }
    }
    return 0
}
