#ifndef ROLLOUT_CCURL_SHIM_H
#define ROLLOUT_CCURL_SHIM_H
// libcurl (Debian: libcurl4-openssl-dev), loaded with dlopen on first use rather than linked: libcurl pulls in
// some thirty shared libraries (TLS, HTTP/2, LDAP, SSH, Kerberos...) whose loading would slow down the start of
// every `rollout` command by about 10 ms, although only `--store firebase:...` uses it.
//
// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: typed wrappers below.
#include <curl/curl.h>
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

/// The table, defined once, in shim.c. Not a static of a static inline function here: Swift compiles each source
/// file of a module into an object of its own, and such a static gave each object its own copy, of which only
/// the loading object's was ever filled (Sources/CPostgres/include/shim.h tells the -O crash that came of it).
extern rollout_curl_api rollout_curl_api_table;

/// Loads libcurl and curl_global_init()s it; returns 0 on success. Call once (the Swift side does, from a lazy
/// global, which is thread-safe) before any other function here.
int rollout_curl_load(void);

static inline CURL *rollout_curl_easy_init(void) { return rollout_curl_api_table.easy_init(); }
static inline CURLcode rollout_curl_perform(CURL *handle) { return rollout_curl_api_table.easy_perform(handle); }
static inline void rollout_curl_cleanup(CURL *handle) { rollout_curl_api_table.easy_cleanup(handle); }
static inline const char *rollout_curl_strerror(CURLcode code) { return rollout_curl_api_table.easy_strerror(code); }
static inline struct curl_slist *rollout_curl_slist_append(struct curl_slist *list, const char *text) {
    return rollout_curl_api_table.slist_append(list, text);
}
static inline void rollout_curl_slist_free_all(struct curl_slist *list) { rollout_curl_api_table.slist_free_all(list); }

static inline CURLcode rollout_curl_set_long(CURL *handle, CURLoption option, long value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_callback(CURL *handle, CURLoption option, rollout_curl_data_callback value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return rollout_curl_api_table.easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_progress(CURL *handle, rollout_curl_progress_callback value) {
    return rollout_curl_api_table.easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, value);
}
static inline CURLcode rollout_curl_get_response_code(CURL *handle, long *code) {
    return rollout_curl_api_table.easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code);
}
static inline CURLcode rollout_curl_get_request_size(CURL *handle, long *size) {
    return rollout_curl_api_table.easy_getinfo(handle, CURLINFO_REQUEST_SIZE, size);
}
#endif
