#ifndef ROLLOUT_CPOSTGRES_SHIM_H
#define ROLLOUT_CPOSTGRES_SHIM_H
// libpq, the PostgreSQL client library (Debian: libpq-dev, headers in /usr/include/postgresql).
//
// Opened with dlopen on first use rather than linked, like libcurl and libmicrohttpd: libpq pulls in Kerberos,
// LDAP, SASL, GnuTLS and a dozen more libraries whose loading cost every `rollout` command several
// milliseconds, although only `--store postgresql://...` uses it.
//
// The header gives the types. It declares each function used here under a private name (the #defines before
// the #include), and this file defines the real name as a static inline function that calls through the table,
// so the Swift code calls libpq by its documented names. The table is loaded once (shim.c); when libpq cannot
// be opened, PQconnectdb returns NULL and rollout_pq_unavailable() says why.
#include <stddef.h>

// The functions used, except PQconnectdb (below) and the five that return void (at the end): return type, name,
// parameters, arguments.
#define ROLLOUT_PQ_FUNCTIONS(X)                                                                                 \
    X(ConnStatusType, PQstatus, (const PGconn *conn), (conn))                                                   \
    X(PGTransactionStatusType, PQtransactionStatus, (const PGconn *conn), (conn))                               \
    X(char *, PQerrorMessage, (const PGconn *conn), (conn))                                                     \
    X(int, PQsocket, (const PGconn *conn), (conn))                                                              \
    X(PGresult *, PQexec, (PGconn *conn, const char *query), (conn, query))                                     \
    X(PGresult *, PQexecParams,                                                                                 \
      (PGconn *conn, const char *command, int nParams, const Oid *paramTypes, const char *const *paramValues,   \
       const int *paramLengths, const int *paramFormats, int resultFormat),                                    \
      (conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats, resultFormat))             \
    X(int, PQconsumeInput, (PGconn *conn), (conn))                                                              \
    X(PGnotify *, PQnotifies, (PGconn *conn), (conn))                                                           \
    X(ExecStatusType, PQresultStatus, (const PGresult *res), (res))                                             \
    X(char *, PQresultErrorMessage, (const PGresult *res), (res))                                               \
    X(char *, PQresultErrorField, (const PGresult *res, int fieldcode), (res, fieldcode))                       \
    X(int, PQntuples, (const PGresult *res), (res))                                                             \
    X(int, PQnfields, (const PGresult *res), (res))                                                             \
    X(char *, PQgetvalue, (const PGresult *res, int tup_num, int field_num), (res, tup_num, field_num))         \
    X(int, PQgetisnull, (const PGresult *res, int tup_num, int field_num), (res, tup_num, field_num))        \
    X(int, PQsendQueryParams,                                                                                   \
      (PGconn *conn, const char *command, int nParams, const Oid *paramTypes, const char *const *paramValues,   \
       const int *paramLengths, const int *paramFormats, int resultFormat),                                    \
      (conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats, resultFormat))             \
    X(PGresult *, PQgetResult, (PGconn *conn), (conn))                                                          \
    X(int, PQenterPipelineMode, (PGconn *conn), (conn))                                                         \
    X(int, PQexitPipelineMode, (PGconn *conn), (conn))                                                          \
    X(int, PQpipelineSync, (PGconn *conn), (conn))                                                              \
    X(int, PQflush, (PGconn *conn), (conn))                                                                     \
    X(PGresult *, PQprepare,                                                                                    \
      (PGconn *conn, const char *stmtName, const char *query, int nParams, const Oid *paramTypes),               \
      (conn, stmtName, query, nParams, paramTypes))                                                             \
    X(int, PQsendPrepare, (PGconn *conn, const char *stmtName, const char *query, int nParams, const Oid *paramTypes), \
      (conn, stmtName, query, nParams, paramTypes))                                                             \
    X(int, PQsendQueryPrepared,                                                                                 \
      (PGconn *conn, const char *stmtName, int nParams, const char *const *paramValues, const int *paramLengths, \
       const int *paramFormats, int resultFormat),                                                              \
      (conn, stmtName, nParams, paramValues, paramLengths, paramFormats, resultFormat))                         \
    X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn *conn, PQnoticeProcessor proc, void *arg), (conn, proc, arg)) \
    X(PGcancel *, PQgetCancel, (PGconn *conn), (conn))                                                          \
    X(int, PQcancel, (PGcancel *cancel, char *errbuf, int errbufsize), (cancel, errbuf, errbufsize))

// The header's declarations of these functions get private names that nothing defines or calls.
#define PQconnectdb rollout_pq_declared_PQconnectdb
#define PQfinish rollout_pq_declared_PQfinish
#define PQreset rollout_pq_declared_PQreset
#define PQstatus rollout_pq_declared_PQstatus
#define PQtransactionStatus rollout_pq_declared_PQtransactionStatus
#define PQerrorMessage rollout_pq_declared_PQerrorMessage
#define PQsocket rollout_pq_declared_PQsocket
#define PQexec rollout_pq_declared_PQexec
#define PQexecParams rollout_pq_declared_PQexecParams
#define PQconsumeInput rollout_pq_declared_PQconsumeInput
#define PQnotifies rollout_pq_declared_PQnotifies
#define PQresultStatus rollout_pq_declared_PQresultStatus
#define PQresultErrorMessage rollout_pq_declared_PQresultErrorMessage
#define PQresultErrorField rollout_pq_declared_PQresultErrorField
#define PQntuples rollout_pq_declared_PQntuples
#define PQnfields rollout_pq_declared_PQnfields
#define PQgetvalue rollout_pq_declared_PQgetvalue
#define PQgetisnull rollout_pq_declared_PQgetisnull
#define PQsendQueryParams rollout_pq_declared_PQsendQueryParams
#define PQgetResult rollout_pq_declared_PQgetResult
#define PQenterPipelineMode rollout_pq_declared_PQenterPipelineMode
#define PQexitPipelineMode rollout_pq_declared_PQexitPipelineMode
#define PQpipelineSync rollout_pq_declared_PQpipelineSync
#define PQflush rollout_pq_declared_PQflush
#define PQprepare rollout_pq_declared_PQprepare
#define PQsendQueryPrepared rollout_pq_declared_PQsendQueryPrepared
#define PQsendPrepare rollout_pq_declared_PQsendPrepare
#define PQsetNoticeProcessor rollout_pq_declared_PQsetNoticeProcessor
#define PQclear rollout_pq_declared_PQclear
#define PQfreemem rollout_pq_declared_PQfreemem
#define PQgetCancel rollout_pq_declared_PQgetCancel
#define PQcancel rollout_pq_declared_PQcancel
#define PQfreeCancel rollout_pq_declared_PQfreeCancel
#include <postgresql/libpq-fe.h>
#undef PQconnectdb
#undef PQfinish
#undef PQreset
#undef PQstatus
#undef PQtransactionStatus
#undef PQerrorMessage
#undef PQsocket
#undef PQexec
#undef PQexecParams
#undef PQconsumeInput
#undef PQnotifies
#undef PQresultStatus
#undef PQresultErrorMessage
#undef PQresultErrorField
#undef PQntuples
#undef PQnfields
#undef PQgetvalue
#undef PQgetisnull
#undef PQsendQueryParams
#undef PQgetResult
#undef PQenterPipelineMode
#undef PQexitPipelineMode
#undef PQpipelineSync
#undef PQflush
#undef PQprepare
#undef PQsendQueryPrepared
#undef PQsendPrepare
#undef PQsetNoticeProcessor
#undef PQclear
#undef PQfreemem
#undef PQgetCancel
#undef PQcancel
#undef PQfreeCancel

typedef struct {
    const char *failure;
    PGconn *(*PQconnectdb)(const char *conninfo);
    void (*PQfinish)(PGconn *conn);
    void (*PQreset)(PGconn *conn);
    void (*PQclear)(PGresult *res);
    void (*PQfreemem)(void *ptr);
    void (*PQfreeCancel)(PGcancel *cancel);
#define ROLLOUT_PQ_FIELD(ret, name, params, args) ret(*name) params;
    ROLLOUT_PQ_FUNCTIONS(ROLLOUT_PQ_FIELD)
#undef ROLLOUT_PQ_FIELD
} rollout_pq_api;

/// The table, defined once, in shim.c. Not a static of this header: Swift compiles each source file of a module
/// (in release builds, after inlining across files) into an object of its own, and a static inline function
/// owning a static table gave each object its own copy. Only the copy of the file that called PQconnectdb was
/// ever filled; in another file's copy the optimiser saw a table nothing writes, so a call through it never
/// returns, and it dropped the code after it (a `rollout` built with -O crashed on every PostgreSQL store).
extern rollout_pq_api rollout_pq_api_table;

/// The loaded table, or NULL when libpq is unavailable (then rollout_pq_unavailable() says why). Thread-safe:
/// the first call opens libpq (pthread_once).
rollout_pq_api *rollout_pq(void);

/// Why libpq cannot be used, or NULL when it can.
static inline const char *rollout_pq_unavailable(void) {
    return rollout_pq() ? NULL : rollout_pq_api_table.failure;
}

// Every entry point but PQconnectdb is reached only with a connection or result PQconnectdb made, so only it
// has to handle an unavailable library.
static inline PGconn *PQconnectdb(const char *conninfo) {
    rollout_pq_api *a = rollout_pq();
    return a ? a->PQconnectdb(conninfo) : NULL;
}
#define ROLLOUT_PQ_FORWARD(ret, name, params, args)                                                            \
    static inline ret name params { return rollout_pq_api_table.name args; }
ROLLOUT_PQ_FUNCTIONS(ROLLOUT_PQ_FORWARD)
#undef ROLLOUT_PQ_FORWARD
static inline void PQfinish(PGconn *conn) { rollout_pq_api_table.PQfinish(conn); }
static inline void PQreset(PGconn *conn) { rollout_pq_api_table.PQreset(conn); }
static inline void PQclear(PGresult *res) { rollout_pq_api_table.PQclear(res); }
static inline void PQfreemem(void *ptr) { rollout_pq_api_table.PQfreemem(ptr); }
static inline void PQfreeCancel(PGcancel *cancel) { rollout_pq_api_table.PQfreeCancel(cancel); }
#endif
