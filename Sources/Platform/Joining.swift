extension Array where Element == String {
    /// The strings with `separator` between them, as `joined(separator:)` gives them. A loop the compiler
    /// specialises: the standard library's `joined(separator:)` is generic code, and its first call in a process
    /// looks up the collection's associated types and their conformances at run time (a scan of every conformance
    /// record in the binary, about 0.4 million instructions, a twentieth of a `rollout nudge`). Used on the paths
    /// every command and every write run.
    @inlinable public func joinedText(_ separator: String) -> String {
        var out = ""
        for i in indices {
            if i != startIndex { out += separator }
            out += self[i]
        }
        return out
    }
}
