#ifndef ROLLOUT_CQRENCODE_SHIM_H
#define ROLLOUT_CQRENCODE_SHIM_H
// libqrencode (Debian: libqrencode-dev), the QR code of a step-up enrolment.
//
// Opened with dlopen on first use rather than linked, like libpq (see Sources/CPostgres/include/shim.h for the
// naming scheme): only `operator enrol` draws a QR code, and no other command should pay for loading it. When
// the library cannot be opened, QRcode_encodeString returns NULL and rollout_qrencode_unavailable() says why.
#include <errno.h>
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

/// The table, defined once, in shim.c. Not a static of a static inline function here: Swift compiles each source
/// file of a module into an object of its own, and such a static gave each object its own copy, of which only
/// the loading object's was ever filled (Sources/CPostgres/include/shim.h tells the -O crash that came of it).
extern rollout_qrencode_api rollout_qrencode_api_table;

/// The loaded table, or NULL when libqrencode is unavailable. Thread-safe: the first call opens libqrencode
/// (pthread_once).
rollout_qrencode_api *rollout_qrencode(void);

/// Why libqrencode cannot be used, or NULL when it can.
static inline const char *rollout_qrencode_unavailable(void) {
    return rollout_qrencode() ? NULL : rollout_qrencode_api_table.failure;
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

static inline void QRcode_free(QRcode *qrcode) { rollout_qrencode_api_table.free(qrcode); }
#endif
