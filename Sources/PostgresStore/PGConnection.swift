import CPostgres
import Glibc
import Platform

/// What went wrong talking to PostgreSQL, with the server's SQLSTATE when it sent one.
public struct PostgresError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The five-character SQLSTATE (`40001` serialization_failure, `25006` read_only_sql_transaction, ...);
    /// empty for a connection failure.
    public var sqlState: String
    public var message: String

    public init(sqlState: String, message: String) {
        self.sqlState = sqlState
        self.message = message
    }

    public var description: String { sqlState.isEmpty ? message : "\(message) (SQLSTATE \(sqlState))" }

    /// A failure the transaction runner retries by running the transaction again: a serialisation failure or a
    /// deadlock (PostgreSQL's documented "retry the transaction" errors).
    public var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// A statement that waited for another session's lock longer than the session's `lock_timeout` (55P03
    /// lock_not_available): the store is busy.
    public var isLockTimeout: Bool { sqlState == "55P03" }

    /// A write refused because the transaction (the connection, under `--read-only`) is read-only.
    public var isReadOnlyRefusal: Bool { sqlState == "25006" }
}

/// A statement for `PGConnection.pipeline(statements:)`: `$1...` bound to `params` (text, nil is NULL), except the
/// parameters at the indexes of `binary` (0 for `$1`), sent in PostgreSQL's binary form instead: for a `bytea`
/// (the SQL casts the parameter, `$4::bytea`, so the server knows its type) the bytes themselves, with no hex to
/// write on this side or parse on the server's. The `params` entry at such an index is not sent (nil by convention).
///
/// With `prepare`, the statement is also prepared on the connection (as `PGConnection.prepare` does) the first
/// time it is sent, in the same round trip: for the statements of a write that runs again and again (a telemetry
/// batch), which the server otherwise parses and plans every time.
///
/// With `syncAfter`, a sync point follows the statement in its round trip: the statements up to it run (outside an
/// explicit transaction) as one implicit transaction of their own, ended there before the next statement starts,
/// as if they had been sent in a round trip of their own; a failure among them skips only them.
public struct PGStatement: Sendable {
    public var sql: String
    public var params: [String?]
    public var binary: [Int: [UInt8]]
    public var prepare: Bool
    public var syncAfter: Bool

    public init(
        _ sql: String, _ params: [String?], binary: [Int: [UInt8]] = [:], prepare: Bool = false, syncAfter: Bool = false
    ) {
        self.sql = sql
        self.params = params
        self.binary = binary
        self.prepare = prepare
        self.syncAfter = syncAfter
    }
}

/// One libpq connection. Not thread-safe: its owner serialises use.
///
/// Every statement with values goes through `PQexecParams` / `PQsendQueryParams` (text parameters, or binary ones
/// for `PGStatement.binary`; never interpolated into SQL).
public final class PGConnection: @unchecked Sendable {
    private let raw: OpaquePointer

    /// Connects with a libpq connection string or URI (`postgresql://...`, `host=/run/x dbname=y`); libpq
    /// fills what is missing from the `PG*` environment variables.
    public init(_ conninfo: String) throws(PostgresError) {
        guard let c = PQconnectdb(conninfo) else {
            let why = rollout_pq_unavailable().map { String(cString: $0) } ?? "cannot allocate a PostgreSQL connection"
            throw PostgresError(sqlState: "", message: why)
        }
        guard PQstatus(c) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(c)).trimmingWhitespace()
            PQfinish(c)
            throw PostgresError(sqlState: "", message: "cannot connect to PostgreSQL: \(message)")
        }
        raw = c
        canceller = PQgetCancel(c)
        // libpq's default notice processor prints to standard error: under the console that wrote over the screen
        // (a server shutting down sends its FATAL while the connection idles). The notices are kept instead.
        PQsetNoticeProcessor(
            c,
            { log, message in
                guard let log, let message else { return }
                Unmanaged<NoticeLog>.fromOpaque(log).takeUnretainedValue().keep(String(cString: message))
            }, Unmanaged.passUnretained(noticeLog).toOpaque())
    }

    // (`noticeLog`, which libpq may call into until PQfinish, is released after the body of deinit.)
    deinit {
        if let canceller { PQfreeCancel(canceller) }
        PQfinish(raw)
    }

    /// libpq's handle for cancelling this session's statement in progress from another thread (`cancelStatement`),
    /// made again when the session is (`reconnectIfLost`).
    private var canceller: OpaquePointer?
    private let cancelLock = Lock()

    /// Asks the server to cancel the statement this session is running, if any (from any thread: libpq's
    /// `PQcancel` is made for it): the call waiting for its result fails with SQLSTATE 57014. Nothing happens when
    /// the session is idle.
    public func cancelStatement() {
        cancelLock.withLock {
            guard let canceller else { return }
            var message = [CChar](repeating: 0, count: 256)
            _ = PQcancel(canceller, &message, Int32(message.count))
        }
    }

    /// What the server sent outside any statement's result, as libpq hands it to a notice processor: a WARNING or
    /// NOTICE, or the FATAL a server sends as it ends the session (a shutdown, `pg_terminate_backend`). Only ever
    /// called on the thread using the connection, from inside a libpq call.
    final class NoticeLog: @unchecked Sendable {
        /// The newest notices, oldest first, at most `kept`.
        private(set) var notices: [String] = []
        /// How many notices arrived in all (the list keeps only the newest).
        private(set) var received = 0
        static let kept = 8
        func keep(_ notice: String) {
            received += 1
            notices.append(notice.trimmingWhitespace())
            if notices.count > Self.kept { notices.removeFirst(notices.count - Self.kept) }
        }
        /// A new session (`reconnectIfLost`): what the old one was told no longer applies.
        func forget() { notices = [] }
    }

    private let noticeLog = NoticeLog()

    /// The newest notices the server sent this connection outside a statement's result (`NoticeLog`), oldest first.
    public var notices: [String] { noticeLog.notices }

    /// How many round trips to the server this connection has made (each `query`, `execute`, `prepare` and
    /// `pipeline` call is one, whatever the number of statements it carries): what a write costs in latency.
    public private(set) var roundTrips = 0

    /// How many statements this connection has sent (a pipeline's each count): a reader of an earlier result
    /// can tell whether anything ran on the connection since.
    public private(set) var statementsSent = 0

    /// Statements queued by `deferUntilNextRoundTrip`, sent first in the next round trip.
    private var deferred: [PGStatement] = []

    /// Queues statements whose results nobody reads (`BEGIN`, the writes of a publish) to go at the front of the
    /// next round trip instead of one of their own. The server runs them in order before that call's statements,
    /// so everything sent later sees them; a failure among them is thrown by that call (and the server skips the
    /// rest of its round trip, COMMIT included). The transaction runner drops the queue when it rolls back.
    public func deferUntilNextRoundTrip(_ statements: [(sql: String, params: [String?])]) {
        deferred += statements.map { PGStatement($0.sql, $0.params) }
    }

    /// The same with statements that may be prepared as they go (`PGStatement.prepare`).
    public func deferUntilNextRoundTrip(statements: [PGStatement]) {
        deferred += statements
    }

    /// Forgets the queued statements (a rollback: they are to be undone anyway) and returns them.
    @discardableResult
    public func discardDeferred() -> [(sql: String, params: [String?])] {
        defer { deferred = [] }
        return deferred.map { ($0.sql, $0.params) }
    }

    /// Whether statements are queued for the next round trip.
    public var hasDeferred: Bool { !deferred.isEmpty }

    /// Whether the session is gone (the server ended it, the network dropped it): libpq marked it at the call
    /// that met the loss.
    public var isLost: Bool { PQstatus(raw) != CONNECTION_OK }

    /// Statements that set up the session (`SET ...`), run again after a reconnect.
    public var sessionSetup: [String] = []

    /// When the connection was lost (the server restarted, the network dropped it: libpq marks it bad at the
    /// failed call), connects again with the same parameters and runs `sessionSetup`; true when the connection is
    /// usable. Callers use it only between transactions, so nothing is re-sent: the call that met the loss has
    /// already failed (its COMMIT may or may not have landed, which only the caller can tell).
    ///
    /// A connection the server ended while it sat idle (an administrator's `pg_terminate_backend`, a failover, an
    /// idle timeout) still reads as OK until it is used: what waits on its socket is read first, without blocking
    /// (nothing on a live connection; the server's goodbye and the end of the stream on an ended one), so the
    /// next transaction does not fail on it.
    @discardableResult
    public func reconnectIfLost() -> Bool {
        var ended = false
        if PQstatus(raw) == CONNECTION_OK, PQtransactionStatus(raw) == PQTRANS_IDLE, deferred.isEmpty {
            // The goodbye and the end of the stream may take a read each; a few reads at most, only while the
            // socket has something to read now. The goodbye (a FATAL, which libpq hands an idle connection's
            // notice processor) may come before the server closes the socket: it alone ends the session too.
            let before = noticeLog.received
            for _ in 0..<4 {
                var p = pollfd(fd: PQsocket(raw), events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 0) > 0, PQconsumeInput(raw) == 1, PQstatus(raw) == CONNECTION_OK else { break }
            }
            let new = min(noticeLog.received - before, noticeLog.notices.count)
            ended = noticeLog.notices.suffix(new).contains { $0.hasPrefix("FATAL") }
        }
        guard PQstatus(raw) != CONNECTION_OK || ended else { return true }
        PQreset(raw)
        cancelLock.withLock {
            if let canceller { PQfreeCancel(canceller) }
            canceller = PQgetCancel(raw)
        }
        prepared = [:]
        deferred = []
        guard PQstatus(raw) == CONNECTION_OK else { return false }
        noticeLog.forget()
        for statement in sessionSetup where (try? execute(statement)) == nil { return false }
        return true
    }

    /// The statements `prepare`d on this connection, by their SQL: their names.
    private var prepared: [String: String] = [:]

    /// Parses and plans `sql` once for this connection (a named prepared statement): from then on `query` and
    /// `pipeline` run it by name, without parsing and planning it again. For a large statement run on every
    /// transaction (the seal's state query spends more time being planned than run). Prepared statements
    /// outlive transactions; a reconnect forgets them (`reconnectIfLost`).
    public func prepare(_ sql: String) throws(PostgresError) {
        guard prepared[sql] == nil else { return }
        let name = "rollout_\(prepared.count + 1)"
        roundTrips += 1
        try rows(of: PQprepare(raw, name, sql, 0, nil))
        prepared[sql] = name
    }

    /// Runs `sql` with `$1...` bound to `params` (nil is NULL); returns the rows, each column as text or nil.
    @discardableResult
    public func query(_ sql: String, _ params: [String?] = []) throws(PostgresError) -> [[String?]] {
        if prepared[sql] != nil || !deferred.isEmpty { return try pipeline([(sql, params)]).last ?? [] }
        roundTrips += 1
        statementsSent += 1
        let copies: [UnsafeMutablePointer<CChar>?] = params.map { $0.map { strdup($0) } ?? nil }
        defer { for p in copies { free(p) } }
        let result: OpaquePointer? = copies.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress, !buffer.isEmpty else {
                return PQexecParams(raw, sql, 0, nil, nil, nil, nil, 0)
            }
            return base.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                PQexecParams(raw, sql, Int32(buffer.count), nil, $0, nil, nil, 0)
            }
        }
        return try rows(of: result)
    }

    /// Runs `statements` in one round trip (libpq's pipeline mode): sends every statement, then reads every
    /// result, in order; the server runs them one after another, each as `query` would (so inside a READ
    /// COMMITTED transaction each still sees what committed before it started). When one fails the server skips
    /// the rest and this throws the first failure. Only the last statement may return many rows: the others'
    /// results wait in the server's buffer while this connection is still sending.
    ///
    /// Statements queued by `deferUntilNextRoundTrip` go first; the answer holds the rows of `statements` only.
    @discardableResult
    public func pipeline(_ statements: [(sql: String, params: [String?])]) throws(PostgresError) -> [[[String?]]] {
        try pipeline(statements: statements.map { PGStatement($0.sql, $0.params) })
    }

    /// `pipeline` with statements that may carry binary parameters (`PGStatement.binary`).
    @discardableResult
    public func pipeline(statements: [PGStatement]) throws(PostgresError) -> [[[String?]]] {
        guard !statements.isEmpty || !deferred.isEmpty else { return [] }
        do {
            return try pipeline(statements: statements, streaming: { _ in })
        } catch let error as PostgresError {
            throw error
        } catch {
            preconditionFailure("a pipeline without a body threw \(error)")
        }
    }

    /// One round trip whose statements are made while it runs: `statements` go at once, then `more` runs with a
    /// `send` that sends the statements it is given right away, so the server runs them while `more` goes on (the
    /// caller's work and the server's overlap); then the sync and every result, in order. A failure
    /// among the statements makes the server skip the rest of them; `send` does not throw for it (the server's
    /// answer is read after the sync) but it does throw when the connection cannot send. When `more` throws, the
    /// round trip still ends (the statements sent so far have run, or been skipped) before its error is thrown; a
    /// caller inside a transaction then rolls it back. The results of the statements the server ran keep the
    /// connection's buffers small: none but the last may return many rows.
    ///
    /// Statements queued by `deferUntilNextRoundTrip` go first; the answer holds the rows of the others only.
    @discardableResult
    public func pipeline(
        statements: [PGStatement], streaming more: (_ send: ([PGStatement]) throws -> Void) throws -> Void
    ) throws -> [[[String?]]] {
        let queued = deferred.count
        let first = deferred + statements
        deferred = []
        roundTrips += 1
        guard PQenterPipelineMode(raw) == 1 else { throw connectionError() }
        defer { PQexitPipelineMode(raw) }
        // What was sent, in order: each statement's query and, before a statement prepared in this round trip,
        // its preparation (a result of its own); a sync point within the round trip (`PGStatement.syncAfter`) is an
        // entry that is neither.
        var sent: [(preparing: String?, isQuery: Bool)] = []
        var preparing: [String: String] = [:]
        var failure: PostgresError?
        func enqueue(_ statements: [PGStatement]) {
            for statement in statements where failure == nil {
                statementsSent += 1
                if let error = sendOne(statement, preparing: &preparing, sent: &sent) {
                    failure = error
                } else if statement.syncAfter {
                    if PQpipelineSync(raw) == 1 { sent.append((nil, false)) } else { failure = connectionError() }
                }
            }
        }
        enqueue(first)
        var bodyError: (any Error)?
        if failure == nil, PQflush(raw) != 0 { failure = connectionError() }
        if failure == nil {
            do {
                try more { statements in
                    enqueue(statements)
                    if failure == nil, PQflush(raw) != 0 { failure = connectionError() }
                    if let failure { throw failure }
                }
            } catch {
                if failure == nil { bodyError = error }
            }
        }
        let synced = PQpipelineSync(raw) == 1
        if !synced, failure == nil { failure = connectionError() }
        var out: [[[String?]]] = []
        out.reserveCapacity(sent.count)
        // Each preparation's and statement's result, then NULL; after them the sync's own result.
        for entry in sent {
            if entry.preparing == nil, !entry.isQuery {
                // A sync point within the round trip: its result comes right after the last statement before it.
                var synced = false
                while !synced, let result = PQgetResult(raw) {
                    synced = PQresultStatus(result) == PGRES_PIPELINE_SYNC
                    PQclear(result)
                }
                if !synced, failure == nil { failure = connectionError() }
                continue
            }
            var rowsOfStatement: [[String?]] = []
            var ok = true
            while let result = PQgetResult(raw) {
                do {
                    rowsOfStatement = try rows(of: result)
                } catch {
                    ok = false
                    if failure == nil { failure = error }
                }
            }
            if entry.isQuery { out.append(rowsOfStatement) }
            // A preparation the server took outlives whatever follows it (statements are not transactional);
            // one it refused or skipped is not remembered, so the next round trip prepares it again.
            if let sql = entry.preparing, ok, let name = preparing[sql] { prepared[sql] = name }
        }
        if synced {
            while let result = PQgetResult(raw) {
                let status = PQresultStatus(result)
                PQclear(result)
                if status == PGRES_PIPELINE_SYNC { break }
            }
        }
        if let failure { throw failure }
        if let bodyError { throw bodyError }
        return Array(out.dropFirst(queued))
    }

    /// Sends one statement of a pipeline (and, first, its preparation when it asks to be prepared and is not yet),
    /// recording what was sent; the connection's error when it could not be sent.
    private func sendOne(
        _ statement: PGStatement, preparing: inout [String: String], sent: inout [(preparing: String?, isQuery: Bool)]
    ) -> PostgresError? {
        let sql = statement.sql
        var name = prepared[sql] ?? preparing[sql]
        if name == nil, statement.prepare {
            let fresh = "rollout_\(prepared.count + preparing.count + 1)"
            guard PQsendPrepare(raw, fresh, sql, 0, nil) == 1 else { return connectionError() }
            preparing[sql] = fresh
            sent.append((sql, false))
            name = fresh
        }
        let params = statement.params
        // Text parameters as C strings; binary ones as their bytes with a length (libpq reads `length` bytes).
        var copies: [UnsafeMutablePointer<CChar>?] = []
        copies.reserveCapacity(params.count)
        var lengths: [Int32] = []
        var formats: [Int32] = []
        if !statement.binary.isEmpty {
            lengths = [Int32](repeating: 0, count: params.count)
            formats = [Int32](repeating: 0, count: params.count)
        }
        for i in params.indices {
            if let bytes = statement.binary[i] {
                let copy = malloc(max(bytes.count, 1)).assumingMemoryBound(to: CChar.self)
                bytes.withUnsafeBytes { b in if let from = b.baseAddress { memcpy(copy, from, b.count) } }
                copies.append(copy)
                lengths[i] = Int32(bytes.count)
                formats[i] = 1
            } else {
                copies.append(params[i].map { strdup($0) } ?? nil)
            }
        }
        defer { for p in copies { free(p) } }
        let ok: Int32 = copies.withUnsafeBufferPointer { buffer in
            let count = Int32(buffer.count)
            guard let base = buffer.baseAddress, !buffer.isEmpty else {
                return name.map { PQsendQueryPrepared(raw, $0, 0, nil, nil, nil, 0) }
                    ?? PQsendQueryParams(raw, sql, 0, nil, nil, nil, nil, 0)
            }
            return base.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { values in
                guard !formats.isEmpty else {
                    return name.map { PQsendQueryPrepared(raw, $0, count, values, nil, nil, 0) }
                        ?? PQsendQueryParams(raw, sql, count, nil, values, nil, nil, 0)
                }
                return lengths.withUnsafeBufferPointer { lengths in
                    formats.withUnsafeBufferPointer { formats in
                        name.map { PQsendQueryPrepared(raw, $0, count, values, lengths.baseAddress, formats.baseAddress, 0) }
                            ?? PQsendQueryParams(raw, sql, count, nil, values, lengths.baseAddress, formats.baseAddress, 0)
                    }
                }
            }
        }
        guard ok == 1 else { return connectionError() }
        sent.append((nil, true))
        return nil
    }

    /// libpq's error for the connection; when the server ended the session with a FATAL notice (a shutdown, an
    /// administrator's `pg_terminate_backend`), its words too.
    private func connectionError() -> PostgresError {
        var message = String(cString: PQerrorMessage(raw)).trimmingWhitespace()
        if PQstatus(raw) != CONNECTION_OK, let fatal = notices.last(where: { $0.hasPrefix("FATAL:") }), !message.contains(fatal) {
            message += " (the server said: \(fatal.replacing("  ", with: " ")))"
        }
        return PostgresError(sqlState: "", message: message)
    }

    /// Runs one or more statements without parameters (schema migrations).
    /// A single statement without parameters joins the statements queued by `deferUntilNextRoundTrip` in one
    /// round trip; several (separated by `;`, which pipelines cannot carry) go after them.
    public func execute(_ sql: String) throws(PostgresError) {
        if !deferred.isEmpty {
            if Self.isSingleStatement(sql) {
                try pipeline([(sql, [])])
                return
            }
            try pipeline([])
        }
        roundTrips += 1
        statementsSent += 1
        try rows(of: PQexec(raw, sql))
    }

    /// `COMMIT`, `ROLLBACK`, `BEGIN ...`: no `;` inside.
    private static func isSingleStatement(_ sql: String) -> Bool { !sql.contains(";") }

    @discardableResult
    private func rows(of result: OpaquePointer?) throws(PostgresError) -> [[String?]] {
        guard let result else {
            throw PostgresError(sqlState: "", message: String(cString: PQerrorMessage(raw)).trimmingWhitespace())
        }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? ""
            let message = String(cString: PQresultErrorMessage(result)).trimmingWhitespace()
            throw PostgresError(sqlState: state, message: message.isEmpty ? "PostgreSQL error" : message)
        }
        let n = PQntuples(result)
        let m = PQnfields(result)
        var out: [[String?]] = []
        out.reserveCapacity(Int(n))
        for r in 0..<n {
            var row: [String?] = []
            row.reserveCapacity(Int(m))
            for c in 0..<m {
                row.append(PQgetisnull(result, r, c) != 0 ? nil : String(cString: PQgetvalue(result, r, c)))
            }
            out.append(row)
        }
        return out
    }

    /// Waits up to `timeout` seconds for a notification on a channel this connection `LISTEN`s on; returns its
    /// channel and payload, or nil when none arrived in time.
    public func waitForNotification(timeout: Double) throws(PostgresError) -> (channel: String, payload: String)? {
        let deadline = Deadline(secondsFromNow: timeout)
        while true {
            if PQconsumeInput(raw) == 0 { throw connectionError() }
            if let n = PQnotifies(raw) {
                let payload = String(cString: n.pointee.extra)
                let channel = String(cString: n.pointee.relname)
                PQfreemem(n)
                return (channel, payload)
            }
            let left = deadline.secondsLeft
            if left <= 0 { return nil }
            var pfd = pollfd(fd: PQsocket(raw), events: Int16(POLLIN), revents: 0)
            _ = poll(&pfd, 1, Int32(min(left, 1) * 1000) + 1)
        }
    }
}
