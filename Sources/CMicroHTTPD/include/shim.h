#ifndef ROLLOUT_CMICROHTTPD_SHIM_H
#define ROLLOUT_CMICROHTTPD_SHIM_H
// libmicrohttpd (Debian: libmicrohttpd-dev), the HTTP/1.1 server under `rollout serve`.
//
// The library is opened with dlopen when a server starts, not linked: Debian's build pulls in GnuTLS and nine
// more libraries whose loading and initialisation added about 12 ms to the start of every `rollout` command.
// The header gives the types; the functions are reached through the table below. Swift cannot call C variadic
// functions, so the variadic entry points are wrapped here too.
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

typedef struct {
    void *handle;
    struct MHD_Daemon *(*start_daemon)(unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *,
                                       MHD_AccessHandlerCallback, void *, ...);
    const union MHD_DaemonInfo *(*get_daemon_info)(struct MHD_Daemon *, enum MHD_DaemonInfoType, ...);
    const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *, enum MHD_ConnectionInfoType, ...);
    int (*get_connection_values)(struct MHD_Connection *, enum MHD_ValueKind, MHD_KeyValueIterator, void *);
    struct MHD_Response *(*create_response_from_buffer)(size_t, void *, enum MHD_ResponseMemoryMode);
    enum MHD_Result (*add_response_header)(struct MHD_Response *, const char *, const char *);
    enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int, struct MHD_Response *);
    void (*destroy_response)(struct MHD_Response *);
    MHD_socket (*quiesce_daemon)(struct MHD_Daemon *);
    void (*stop_daemon)(struct MHD_Daemon *);
    const char *(*get_version)(void);
    void (*suspend_connection)(struct MHD_Connection *);
    void (*resume_connection)(struct MHD_Connection *);
} rollout_mhd_api;

/// The table, defined once, in shim.c. Not a static of a static inline function here: Swift compiles each source
/// file of a module into an object of its own, and such a static gave each object its own copy, of which only
/// the loading object's was ever filled (Sources/CPostgres/include/shim.h tells the -O crash that came of it).
extern rollout_mhd_api rollout_mhd_api_table;

/// Opens libmicrohttpd and resolves the functions used; NULL on success, else why it failed. Not thread-safe:
/// call it under a lock.
const char *rollout_mhd_load(void);

/// The URI log callback's type (MHD_OPTION_URI_LOG_CALLBACK): the request's URI as received, before
/// libmicrohttpd percent-decodes it; what it returns is the request's first `con_cls`.
typedef void *(*rollout_mhd_uri_callback)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Starts a daemon on the IPv4 address `address` with the given limits.
/// `pool_size` worker threads each run their own event loop (MHD_OPTION_THREAD_POOL_SIZE); `per_address_limit`
/// caps the connections from one client address (0: no cap). `uri` sees every request's raw URI, `connections`
/// every connection's start and close; all callbacks share `cls`.
static inline struct MHD_Daemon *rollout_mhd_start(
    unsigned int flags, const struct sockaddr_in *address, unsigned int pool_size, unsigned int connection_limit,
    unsigned int per_address_limit, unsigned int connection_timeout_seconds, size_t connection_memory_limit,
    MHD_AccessHandlerCallback handler, MHD_RequestCompletedCallback completed, rollout_mhd_uri_callback uri,
    MHD_NotifyConnectionCallback connections, void *cls)
{
    struct MHD_OptionItem options[] = {
        {MHD_OPTION_SOCK_ADDR, 0, (void *)address},
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)pool_size, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)connection_limit, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)per_address_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)connection_timeout_seconds, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)connection_memory_limit, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, cls},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri, cls},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)connections, cls},
        {MHD_OPTION_END, 0, NULL},
    };
    return rollout_mhd_api_table.start_daemon(flags, 0, NULL, NULL, handler, cls, MHD_OPTION_ARRAY, options,
                                              MHD_OPTION_END);
}

/// The port the daemon is bound to (0 if unknown).
static inline uint16_t rollout_mhd_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = rollout_mhd_api_table.get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// The peer's IPv4/IPv6 address as text into `buffer` (empty if unknown).
static inline void rollout_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size)
{
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info =
        rollout_mhd_api_table.get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return;
    const struct sockaddr *sa = info->client_addr;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buffer, (socklen_t)size);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buffer, (socklen_t)size);
    }
}

/// The connection's socket (-1 if unknown), for `shutdown` by the deadline watch.
static inline int rollout_mhd_connection_fd(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        rollout_mhd_api_table.get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}

/// The pointer kept for the connection at MHD_CONNECTION_NOTIFY_STARTED (NULL if none).
static inline void *rollout_mhd_socket_context(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        rollout_mhd_api_table.get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/// The status of the response queued on the connection, by the server or by libmicrohttpd itself (0 if none).
/// libmicrohttpd calls the request-completed callback before it lets go of the response, so it is there then.
static inline unsigned int rollout_mhd_queued_status(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        rollout_mhd_api_table.get_connection_info(connection, MHD_CONNECTION_INFO_HTTP_STATUS);
    return info ? info->http_status : 0;
}

/// The loaded library's version, e.g. "0.9.75".
static inline const char *rollout_mhd_version(void) { return rollout_mhd_api_table.get_version(); }

/// Request headers (`header` non-zero) or query arguments, one callback each.
static inline void rollout_mhd_values(struct MHD_Connection *c, int header, MHD_KeyValueIterator it, void *cls)
{
    rollout_mhd_api_table.get_connection_values(c, header ? MHD_HEADER_KIND : MHD_GET_ARGUMENT_KIND, it, cls);
}

/// A response holding its own copy of `size` bytes.
static inline struct MHD_Response *rollout_mhd_response_copy(size_t size, const void *bytes)
{
    return rollout_mhd_api_table.create_response_from_buffer(size, (void *)bytes, MHD_RESPMEM_MUST_COPY);
}

static inline int rollout_mhd_add_header(struct MHD_Response *r, const char *name, const char *value)
{
    return rollout_mhd_api_table.add_response_header(r, name, value) == MHD_YES;
}

static inline enum MHD_Result rollout_mhd_queue(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r)
{
    return rollout_mhd_api_table.queue_response(c, status, r);
}

static inline void rollout_mhd_destroy_response(struct MHD_Response *r) { rollout_mhd_api_table.destroy_response(r); }
static inline MHD_socket rollout_mhd_quiesce(struct MHD_Daemon *d) { return rollout_mhd_api_table.quiesce_daemon(d); }
static inline void rollout_mhd_stop(struct MHD_Daemon *d) { rollout_mhd_api_table.stop_daemon(d); }
/// Takes a connection out of its worker's event loop (only from the access handler; the daemon needs
/// MHD_ALLOW_SUSPEND_RESUME), and puts it back, from any thread: its worker then calls the access handler again.
static inline void rollout_mhd_suspend(struct MHD_Connection *c) { rollout_mhd_api_table.suspend_connection(c); }
static inline void rollout_mhd_resume(struct MHD_Connection *c) { rollout_mhd_api_table.resume_connection(c); }
#endif
