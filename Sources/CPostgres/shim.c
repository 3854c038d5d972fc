// The one table of libpq's functions (see shim.h) and its loader.
#include "shim.h"
#include <dlfcn.h>
#include <pthread.h>

rollout_pq_api rollout_pq_api_table;

static void rollout_pq_open(void) {
    rollout_pq_api *a = &rollout_pq_api_table;
    void *h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libpq.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        a->failure = "libpq.so.5 cannot be opened (Debian: apt-get install libpq5)";
        return;
    }
#define ROLLOUT_PQ_RESOLVE(ret, name, params, args)                                                            \
    *(void **)(&a->name) = dlsym(h, #name);                                                                     \
    if (!a->name) {                                                                                             \
        a->failure = "libpq.so.5 lacks " #name;                                                                 \
        return;                                                                                                 \
    }
    ROLLOUT_PQ_RESOLVE(, PQconnectdb, , )
    ROLLOUT_PQ_RESOLVE(, PQfinish, , )
    ROLLOUT_PQ_RESOLVE(, PQreset, , )
    ROLLOUT_PQ_RESOLVE(, PQclear, , )
    ROLLOUT_PQ_RESOLVE(, PQfreemem, , )
    ROLLOUT_PQ_RESOLVE(, PQfreeCancel, , )
    ROLLOUT_PQ_FUNCTIONS(ROLLOUT_PQ_RESOLVE)
#undef ROLLOUT_PQ_RESOLVE
}

rollout_pq_api *rollout_pq(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, rollout_pq_open);
    return rollout_pq_api_table.failure ? NULL : &rollout_pq_api_table;
}
