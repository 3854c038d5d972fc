#ifndef ROLLOUT_CMICROHTTPD_SHIM_H
#define ROLLOUT_CMICROHTTPD_SHIM_H
// libmicrohttpd (Debian: libmicrohttpd-dev), the HTTP/1.1 server under `rollout serve`.
//
// The library is opened with dlopen when a server starts, not linked: Debian's build pulls in GnuTLS and nine
// more libraries whose loading and initialisation added about 12 ms to the start of every `rollout` command.
// The header gives the types; the functions are reached through the table below. Swift cannot call C variadic
// functions, so the variadic entry points are wrapped here too. Only Sources/ExchangeServer/HTTPServer.swift
// may call these (the table is per translation unit).
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <dlfcn.h>
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
} rollout_mhd_api;

/// The table (a function-local static: Swift's importer emits it with the function that owns it).
static inline rollout_mhd_api *rollout_mhd_table(void)
{
    static rollout_mhd_api api;
    return &api;
}
#define rollout_mhd (*rollout_mhd_table())

/// Opens libmicrohttpd and resolves the functions used; NULL on success, else why it failed. Not thread-safe:
/// call it under a lock.
static inline const char *rollout_mhd_load(void)
{
    if (rollout_mhd.handle) return NULL;
    void *h = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libmicrohttpd.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
    rollout_mhd_api api;
    memset(&api, 0, sizeof api);
#define ROLLOUT_MHD_SYMBOL(field, name) \
    *(void **)(&api.field) = dlsym(h, name); \
    if (!api.field) return "libmicrohttpd lacks " name;
    ROLLOUT_MHD_SYMBOL(start_daemon, "MHD_start_daemon")
    ROLLOUT_MHD_SYMBOL(get_daemon_info, "MHD_get_daemon_info")
    ROLLOUT_MHD_SYMBOL(get_connection_info, "MHD_get_connection_info")
    ROLLOUT_MHD_SYMBOL(get_connection_values, "MHD_get_connection_values")
    ROLLOUT_MHD_SYMBOL(create_response_from_buffer, "MHD_create_response_from_buffer")
    ROLLOUT_MHD_SYMBOL(add_response_header, "MHD_add_response_header")
    ROLLOUT_MHD_SYMBOL(queue_response, "MHD_queue_response")
    ROLLOUT_MHD_SYMBOL(destroy_response, "MHD_destroy_response")
    ROLLOUT_MHD_SYMBOL(quiesce_daemon, "MHD_quiesce_daemon")
    ROLLOUT_MHD_SYMBOL(stop_daemon, "MHD_stop_daemon")
#undef ROLLOUT_MHD_SYMBOL
    api.handle = h;
    rollout_mhd = api;
    return NULL;
}

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
    return rollout_mhd.start_daemon(flags, 0, NULL, NULL, handler, cls, MHD_OPTION_ARRAY, options,
                                    MHD_OPTION_END);
}

/// The port the daemon is bound to (0 if unknown).
static inline uint16_t rollout_mhd_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = rollout_mhd.get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// The peer's IPv4/IPv6 address as text into `buffer` (empty if unknown).
static inline void rollout_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size)
{
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info =
        rollout_mhd.get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
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
        rollout_mhd.get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}

/// The pointer kept for the connection at MHD_CONNECTION_NOTIFY_STARTED (NULL if none).
static inline void *rollout_mhd_socket_context(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        rollout_mhd.get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/// Request headers (`header` non-zero) or query arguments, one callback each.
static inline void rollout_mhd_values(struct MHD_Connection *c, int header, MHD_KeyValueIterator it, void *cls)
{
    rollout_mhd.get_connection_values(c, header ? MHD_HEADER_KIND : MHD_GET_ARGUMENT_KIND, it, cls);
}

/// A response holding its own copy of `size` bytes.
static inline struct MHD_Response *rollout_mhd_response_copy(size_t size, const void *bytes)
{
    return rollout_mhd.create_response_from_buffer(size, (void *)bytes, MHD_RESPMEM_MUST_COPY);
}

static inline int rollout_mhd_add_header(struct MHD_Response *r, const char *name, const char *value)
{
    return rollout_mhd.add_response_header(r, name, value) == MHD_YES;
}

static inline enum MHD_Result rollout_mhd_queue(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r)
{
    return rollout_mhd.queue_response(c, status, r);
}

static inline void rollout_mhd_destroy_response(struct MHD_Response *r) { rollout_mhd.destroy_response(r); }
static inline MHD_socket rollout_mhd_quiesce(struct MHD_Daemon *d) { return rollout_mhd.quiesce_daemon(d); }
static inline void rollout_mhd_stop(struct MHD_Daemon *d) { rollout_mhd.stop_daemon(d); }
#endif
