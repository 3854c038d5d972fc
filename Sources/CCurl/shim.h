#ifndef ROLLOUT_CCURL_SHIM_H
#define ROLLOUT_CCURL_SHIM_H
// libcurl (Debian: libcurl4-openssl-dev). curl_easy_setopt and curl_easy_getinfo are variadic, which Swift
// cannot call: typed wrappers below.
#include <curl/curl.h>

typedef size_t (*rollout_curl_data_callback)(char *data, size_t size, size_t count, void *context);

static inline CURLcode rollout_curl_set_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_set_callback(CURL *handle, CURLoption option, rollout_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rollout_curl_get_response_code(CURL *handle, long *code) {
    return curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code);
}
static inline CURLcode rollout_curl_get_request_size(CURL *handle, long *size) {
    return curl_easy_getinfo(handle, CURLINFO_REQUEST_SIZE, size);
}
#endif
