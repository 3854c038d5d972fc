// The one table of libmicrohttpd's functions (see shim.h) and its loader.
#include "shim.h"
#include <dlfcn.h>
#include <string.h>

rollout_mhd_api rollout_mhd_api_table;

const char *rollout_mhd_load(void)
{
    if (rollout_mhd_api_table.handle) return NULL;
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
    ROLLOUT_MHD_SYMBOL(get_version, "MHD_get_version")
    ROLLOUT_MHD_SYMBOL(suspend_connection, "MHD_suspend_connection")
    ROLLOUT_MHD_SYMBOL(resume_connection, "MHD_resume_connection")
#undef ROLLOUT_MHD_SYMBOL
    api.handle = h;
    rollout_mhd_api_table = api;
    return NULL;
}
