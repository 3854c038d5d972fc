#ifndef ROLLOUT_CQRENCODE_SHIM_H
#define ROLLOUT_CQRENCODE_SHIM_H
// libqrencode (Debian: libqrencode-dev), the QR code of a step-up enrolment.
//
// Opened with dlopen on first use rather than linked, like libpq (see Sources/CPostgres/shim.h for the naming
// scheme): only `operator enrol` draws a QR code, and no other command should pay for loading it. When the
// library cannot be opened, QRcode_encodeString returns NULL and rollout_qrencode_unavailable() says why.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#define QRcode_encodeString rollout_qrencode_declared_QRcode_encodeString
#define QRcode_free rollout_qrencode_declared_QRcode_free
#include <qrencode.h>
#undef QRcode_encodeString
#undef QRcode_free

typedef struct {
    const char *failure;
    QRcode *(*encodeString)(const char *string, int version, QRecLevel level, QRencodeMode hint, int casesensitive);
    void (*free)(QRcode *qrcode);
} rollout_qrencode_api;

/// The table (a function-local static: Swift's importer emits it with the function that owns it).
static inline rollout_qrencode_api *rollout_qrencode_table(void) {
    static rollout_qrencode_api api;
    return &api;
}

static inline void rollout_qrencode_open(void) {
    rollout_qrencode_api *a = rollout_qrencode_table();
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

/// The loaded table, or NULL when libqrencode is unavailable.
static inline rollout_qrencode_api *rollout_qrencode(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, rollout_qrencode_open);
    rollout_qrencode_api *a = rollout_qrencode_table();
    return a->failure ? NULL : a;
}

/// Why libqrencode cannot be used, or NULL when it can.
static inline const char *rollout_qrencode_unavailable(void) {
    return rollout_qrencode() ? NULL : rollout_qrencode_table()->failure;
}

static inline QRcode *QRcode_encodeString(const char *string, int version, QRecLevel level, QRencodeMode hint,
                                          int casesensitive) {
    rollout_qrencode_api *a = rollout_qrencode();
    if (!a) {
        errno = ELIBACC;
        return NULL;
    }
    return a->encodeString(string, version, level, hint, casesensitive);
}

static inline void QRcode_free(QRcode *qrcode) { rollout_qrencode_table()->free(qrcode); }
#endif
