// The one table of libqrencode's functions (see shim.h) and its loader.
#include "shim.h"
#include <dlfcn.h>
#include <pthread.h>

rollout_qrencode_api rollout_qrencode_api_table;

static void rollout_qrencode_open(void) {
    rollout_qrencode_api *a = &rollout_qrencode_api_table;
    void *h = dlopen("libqrencode.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libqrencode.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        a->failure = "libqrencode.so.4 cannot be opened (Debian: apt-get install libqrencode4)";
        return;
    }
    *(void **)(&a->encodeString) = dlsym(h, "QRcode_encodeString");
    *(void **)(&a->free) = dlsym(h, "QRcode_free");
    if (!a->encodeString || !a->free) a->failure = "libqrencode.so.4 lacks QRcode_encodeString or QRcode_free";
}

rollout_qrencode_api *rollout_qrencode(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, rollout_qrencode_open);
    return rollout_qrencode_api_table.failure ? NULL : &rollout_qrencode_api_table;
}
