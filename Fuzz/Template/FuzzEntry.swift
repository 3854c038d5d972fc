import JSON
import RemoteConfig

// libFuzzer entry for the Remote Config template model. Properties: no trap; an accepted template written
// (as the firebase CLI writes it) parses back to the same document and conditions, and converting it to the
// other form and back keeps its conditions' meaning.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let template = try? RemoteConfigTemplate(parsing: text) else { return 0 }
    let again: RemoteConfigTemplate
    do {
        again = try RemoteConfigTemplate(parsing: template.prettyText)
    } catch {
        preconditionFailure("a written template does not parse back: \(error)")
    }
    precondition(again == template, "parse -> write -> parse changed the template")
    precondition(again.prettyText == template.prettyText, "writing is not stable")
    let other: RemoteConfigTemplate.Form = template.form == .client ? .server : .client
    if let converted = try? template.converted(to: other) {
        precondition(converted.conditions.map(\.name) == template.conditions.map(\.name), "conversion renamed conditions")
    }
    return 0
}
