// The one table of libfido2's functions (see shim.h) and its loader.
#include "shim.h"
#include <dlfcn.h>
#include <pthread.h>

rollout_fido2_api rollout_fido2_api_table;

static void rollout_fido2_open(void) {
    rollout_fido2_api *a = &rollout_fido2_api_table;
    void *h = dlopen("libfido2.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libfido2.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        a->failure = "libfido2.so.1 cannot be opened (Debian: apt-get install libfido2-1)";
        return;
    }
#define ROLLOUT_FIDO2_RESOLVE(ret, name, params, args)                                                         \
    *(void **)(&a->name) = dlsym(h, #name);                                                                     \
    if (!a->name) {                                                                                             \
        a->failure = "libfido2.so.1 lacks " #name;                                                              \
        return;                                                                                                 \
    }
#define ROLLOUT_FIDO2_RESOLVE_VOID(name, params, args) ROLLOUT_FIDO2_RESOLVE(, name, , )
    ROLLOUT_FIDO2_RESOLVE(, fido_init, , )
    ROLLOUT_FIDO2_RESOLVE(, fido_strerr, , )
    ROLLOUT_FIDO2_CONSTRUCTORS(ROLLOUT_FIDO2_RESOLVE)
    ROLLOUT_FIDO2_FUNCTIONS(ROLLOUT_FIDO2_RESOLVE)
    ROLLOUT_FIDO2_VOID_FUNCTIONS(ROLLOUT_FIDO2_RESOLVE_VOID)
#undef ROLLOUT_FIDO2_RESOLVE_VOID
#undef ROLLOUT_FIDO2_RESOLVE
}

rollout_fido2_api *rollout_fido2(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, rollout_fido2_open);
    return rollout_fido2_api_table.failure ? NULL : &rollout_fido2_api_table;
}
