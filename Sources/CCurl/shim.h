#ifndef ROLLOUT_CCURL_SHIM_H
#define ROLLOUT_CCURL_SHIM_H
// libcurl (Debian: libcurl4-openssl-dev), loaded with dlopen on first use rather than linked: libcurl pulls in
// some thirty shared libraries (TLS, HTTP/2, LDAP, SSH, Kerberos...) whose loading would slow down the start of
// every `rollout` command by about 10 ms, although only `--store firebase:...` uses it.
//
// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: typed wrappers below.
#include <curl/curl.h>
#include <dlfcn.h>
#include <stddef.h>

typedef size_t (*rollout_curl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*rollout_curl_progress_callback)(
    void *context, curl_off_t download_total, curl_off_t download_now, curl_off_t upload_total, curl_off_t upload_now);

typedef struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *handle, CURLoption option, ...);
    CURLcode (*easy_getinfo)(CURL *handle, CURLINFO info, ...);
    CURLcode (*easy_perform)(CURL *handle);
    void (*easy_cleanup)(CURL *handle);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *text);
    void (*slist_free_all)(struct curl_slist *list);
} rollout_curl_api;

/// The loaded functions (a function-local static: Swift's importer emits it with the function).
static inline rollout_curl_api *rollout_curl_table(void) {
    static rollout_curl_api api;
    return &api;
}

/// Loads libcurl and curl_global_init()s it; returns 0 on success. Call once (the Swift side does, from a lazy
/// global, which is thread-safe) before any other function here.
static inline int rollout_curl_load(void) {
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    rollout_curl_api *a = rollout_curl_table();
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

static inline CURL *rollout_curl_easy_init(void) { return rollout_curl_table()->easy_init(); }
static inline CURLcode rollout_curl_perform(CURL *handle) { return rollout_curl_table()->easy_perform(handle); }
static inline void rollout_curl_cleanup(CURL *handle) { rollout_curl_table()->easy_cleanup(handle); }
static inline const char *rollout_curl_strerror(CURLcode code) { return rollout_curl_table()->easy_strerror(code); }
static inline struct curl_slist *rollout_curl_slist_append(struct curl_slist *list, const char *text) {
    return rollout_curl_table()->slist_append(list, text);
}
static inline void rollout_curl_slist_free_all(struct curl_slist *list) { rollout_curl_table()->slist_free_all(list); }

static inline CURLcode rollout_curl_set_long(CURL *handle, CURLoption option, long value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_callback(CURL *handle, CURLoption option, rollout_curl_data_callback value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return rollout_curl_table()->easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_progress(CURL *handle, rollout_curl_progress_callback value) {
    return rollout_curl_table()->easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, value);
}
static inline CURLcode rollout_curl_get_response_code(CURL *handle, long *code) {
    return rollout_curl_table()->easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code);
}
static inline CURLcode rollout_curl_get_request_size(CURL *handle, long *size) {
    return rollout_curl_table()->easy_getinfo(handle, CURLINFO_REQUEST_SIZE, size);
}
#endif
