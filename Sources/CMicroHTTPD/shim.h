#ifndef ROLLOUT_CMICROHTTPD_SHIM_H
#define ROLLOUT_CMICROHTTPD_SHIM_H
// libmicrohttpd (Debian: libmicrohttpd-dev), the HTTP/1.1 server under `rollout serve`.
// Swift cannot call C variadic functions, so the few variadic entry points are wrapped here.
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/// Starts a daemon on the IPv4 address `address` (network order struct) with the given limits.
/// `pool_size` worker threads each run their own poll loop (MHD_OPTION_THREAD_POOL_SIZE).
static inline struct MHD_Daemon *rollout_mhd_start(
    unsigned int flags, const struct sockaddr_in *address, unsigned int pool_size, unsigned int connection_limit,
    unsigned int connection_timeout_seconds, size_t connection_memory_limit, MHD_AccessHandlerCallback handler,
    void *handler_cls, MHD_RequestCompletedCallback completed, void *completed_cls)
{
    struct MHD_OptionItem options[] = {
        {MHD_OPTION_SOCK_ADDR, 0, (void *)address},
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)pool_size, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)connection_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)connection_timeout_seconds, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)connection_memory_limit, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls},
        {MHD_OPTION_END, 0, NULL},
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// A response holding its own copy of `size` bytes.
static inline struct MHD_Response *rollout_mhd_response_copy(size_t size, const void *bytes)
{
    return MHD_create_response_from_buffer(size, (void *)bytes, MHD_RESPMEM_MUST_COPY);
}

/// The port the daemon is bound to (0 if unknown).
static inline uint16_t rollout_mhd_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// The peer's IPv4/IPv6 address as text into `buffer` (empty if unknown).
static inline void rollout_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size)
{
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return;
    const struct sockaddr *sa = info->client_addr;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buffer, (socklen_t)size);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buffer, (socklen_t)size);
    }
}
#endif
