// The one table of libcurl's functions (see shim.h) and its loader.
#include "shim.h"
#include <dlfcn.h>

rollout_curl_api rollout_curl_api_table;

int rollout_curl_load(void) {
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    rollout_curl_api *a = &rollout_curl_api_table;
    *(void **)&a->global_init = dlsym(lib, "curl_global_init");
    *(void **)&a->easy_init = dlsym(lib, "curl_easy_init");
    *(void **)&a->easy_setopt = dlsym(lib, "curl_easy_setopt");
    *(void **)&a->easy_getinfo = dlsym(lib, "curl_easy_getinfo");
    *(void **)&a->easy_perform = dlsym(lib, "curl_easy_perform");
    *(void **)&a->easy_cleanup = dlsym(lib, "curl_easy_cleanup");
    *(void **)&a->easy_strerror = dlsym(lib, "curl_easy_strerror");
    *(void **)&a->slist_append = dlsym(lib, "curl_slist_append");
    *(void **)&a->slist_free_all = dlsym(lib, "curl_slist_free_all");
    if (!a->global_init || !a->easy_init || !a->easy_setopt || !a->easy_getinfo || !a->easy_perform || !a->easy_cleanup
        || !a->easy_strerror || !a->slist_append || !a->slist_free_all)
        return -2;
    return a->global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -3;
}
