extension String {
    /// The text of `bytes` when they are valid UTF-8, else nil: the answer of `String(validating:as: UTF8.self)`,
    /// by the standard library's concrete decoder (which repairs) and a comparison with the bytes. The generic
    /// validator looks up the encoding's associated types at run time the first time in a process, about an eighth
    /// of a million instructions of every command that reads a file or parses JSON.
    @inlinable public init?(utf8Bytes bytes: UnsafeBufferPointer<UInt8>) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.utf8.elementsEqual(bytes) else { return nil }
        self = text
    }

    /// The text of `bytes` when they are valid UTF-8, else nil (see the buffer form).
    @inlinable public init?(utf8Bytes bytes: [UInt8]) {
        guard let text = bytes.withUnsafeBufferPointer({ String(utf8Bytes: $0) }) else { return nil }
        self = text
    }
}
