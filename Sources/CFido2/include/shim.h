#ifndef ROLLOUT_CFIDO2_SHIM_H
#define ROLLOUT_CFIDO2_SHIM_H
// libfido2 (Debian: libfido2-dev): FIDO2/CTAP2 security keys over USB HID, or a transport of the caller's own.
//
// Opened with dlopen on first use rather than linked, like libpq (see Sources/CPostgres/include/shim.h for the
// naming scheme). Only the step-up's security-key commands use it, and linking it cost every `rollout` command
// twice: libfido2 loads libcbor, libudev and libz at start-up, and the pkg-config module that found it put the
// system's library directory before .build/static-libs on the link line, so release builds linked libcrypto,
// libsqlite3 and ncurses as shared libraries again (see Package.swift).
//
// The functions that make libfido2's objects (fido_init, fido_dev_new, fido_cred_new, fido_assert_new,
// fido_dev_info_new) and fido_strerr open the library; every other one is reached only with an object one of them
// made. When libfido2 cannot be opened, those constructors return NULL, fido_init does nothing, fido_strerr
// returns why, and so does rollout_fido2_unavailable().
#include <stddef.h>
#include <stdint.h>

// The functions used that return a value, except the entry points: return type, name, parameters, arguments.
#define ROLLOUT_FIDO2_FUNCTIONS(X)                                                                                     \
    X(int, fido_assert_allow_cred,                                                                                     \
      (fido_assert_t *assert, const unsigned char *ptr, size_t len),                                                   \
      (assert, ptr, len))                                                                                              \
    X(size_t, fido_assert_authdata_len, (const fido_assert_t *assert, size_t idx), (assert, idx))                      \
    X(const unsigned char *, fido_assert_authdata_ptr, (const fido_assert_t *assert, size_t idx), (assert, idx))       \
    X(size_t, fido_assert_count, (const fido_assert_t *assert), (assert))                                              \
    X(size_t, fido_assert_id_len, (const fido_assert_t *assert, size_t idx), (assert, idx))                            \
    X(const unsigned char *, fido_assert_id_ptr, (const fido_assert_t *assert, size_t idx), (assert, idx))             \
    X(int, fido_assert_set_clientdata_hash,                                                                            \
      (fido_assert_t *assert, const unsigned char *ptr, size_t len),                                                   \
      (assert, ptr, len))                                                                                              \
    X(int, fido_assert_set_rp, (fido_assert_t *assert, const char *id), (assert, id))                                  \
    X(int, fido_assert_set_up, (fido_assert_t *assert, fido_opt_t up), (assert, up))                                   \
    X(int, fido_assert_set_uv, (fido_assert_t *assert, fido_opt_t uv), (assert, uv))                                   \
    X(size_t, fido_assert_sig_len, (const fido_assert_t *assert, size_t idx), (assert, idx))                           \
    X(const unsigned char *, fido_assert_sig_ptr, (const fido_assert_t *assert, size_t idx), (assert, idx))            \
    X(uint8_t, fido_cred_flags, (const fido_cred_t *cred), (cred))                                                     \
    X(size_t, fido_cred_id_len, (const fido_cred_t *cred), (cred))                                                     \
    X(const unsigned char *, fido_cred_id_ptr, (const fido_cred_t *cred), (cred))                                      \
    X(size_t, fido_cred_pubkey_len, (const fido_cred_t *cred), (cred))                                                 \
    X(const unsigned char *, fido_cred_pubkey_ptr, (const fido_cred_t *cred), (cred))                                  \
    X(int, fido_cred_set_clientdata_hash,                                                                              \
      (fido_cred_t *cred, const unsigned char *ptr, size_t len),                                                       \
      (cred, ptr, len))                                                                                                \
    X(int, fido_cred_set_rp, (fido_cred_t *cred, const char *id, const char *name), (cred, id, name))                  \
    X(int, fido_cred_set_type, (fido_cred_t *cred, int type), (cred, type))                                            \
    X(int, fido_cred_set_user,                                                                                         \
      (fido_cred_t *cred, const unsigned char *user_id, size_t user_id_len, const char *name,                          \
       const char *display_name, const char *icon),                                                                    \
      (cred, user_id, user_id_len, name, display_name, icon))                                                          \
    X(int, fido_cred_set_uv, (fido_cred_t *cred, fido_opt_t uv), (cred, uv))                                           \
    X(uint32_t, fido_cred_sigcount, (const fido_cred_t *cred), (cred))                                                 \
    X(int, fido_cred_verify, (const fido_cred_t *cred), (cred))                                                        \
    X(int, fido_cred_verify_self, (const fido_cred_t *cred), (cred))                                                   \
    X(size_t, fido_cred_x5c_len, (const fido_cred_t *cred), (cred))                                                    \
    X(int, fido_dev_cancel, (fido_dev_t *dev), (dev))                                                                  \
    X(int, fido_dev_close, (fido_dev_t *dev), (dev))                                                                   \
    X(int, fido_dev_get_assert, (fido_dev_t *dev, fido_assert_t *assert, const char *pin), (dev, assert, pin))         \
    X(int, fido_dev_info_manifest, (fido_dev_info_t *devlist, size_t ilen, size_t *olen), (devlist, ilen, olen))       \
    X(const char *, fido_dev_info_path, (const fido_dev_info_t *di), (di))                                             \
    X(const fido_dev_info_t *, fido_dev_info_ptr, (const fido_dev_info_t *devlist, size_t i), (devlist, i))            \
    X(void *, fido_dev_io_handle, (const fido_dev_t *dev), (dev))                                                      \
    X(int, fido_dev_make_cred, (fido_dev_t *dev, fido_cred_t *cred, const char *pin), (dev, cred, pin))                \
    X(int, fido_dev_open, (fido_dev_t *dev, const char *path), (dev, path))                                            \
    X(int, fido_dev_set_io_functions, (fido_dev_t *dev, const fido_dev_io_t *io), (dev, io))                           \
    X(int, fido_dev_set_timeout, (fido_dev_t *dev, int ms), (dev, ms))                                                 \
    X(int, fido_dev_set_transport_functions, (fido_dev_t *dev, const fido_dev_transport_t *t), (dev, t))

// Those that return nothing: name, parameters, arguments.
#define ROLLOUT_FIDO2_VOID_FUNCTIONS(X)                                            \
    X(fido_assert_free, (fido_assert_t **assert_p), (assert_p))                    \
    X(fido_cred_free, (fido_cred_t **cred_p), (cred_p))                            \
    X(fido_dev_free, (fido_dev_t **dev_p), (dev_p))                                \
    X(fido_dev_info_free, (fido_dev_info_t **devlist_p, size_t n), (devlist_p, n))

// The constructors, which open the library first and return NULL when it cannot be opened: return type, name,
// parameters, arguments.
#define ROLLOUT_FIDO2_CONSTRUCTORS(X)                                                                           \
    X(fido_dev_t *, fido_dev_new, (void), ())                                                                   \
    X(fido_cred_t *, fido_cred_new, (void), ())                                                                 \
    X(fido_assert_t *, fido_assert_new, (void), ())                                                             \
    X(fido_dev_info_t *, fido_dev_info_new, (size_t n), (n))

// The header's declarations of these functions get private names that nothing defines or calls.
#define fido_assert_allow_cred rollout_fido2_declared_fido_assert_allow_cred
#define fido_assert_authdata_len rollout_fido2_declared_fido_assert_authdata_len
#define fido_assert_authdata_ptr rollout_fido2_declared_fido_assert_authdata_ptr
#define fido_assert_count rollout_fido2_declared_fido_assert_count
#define fido_assert_id_len rollout_fido2_declared_fido_assert_id_len
#define fido_assert_id_ptr rollout_fido2_declared_fido_assert_id_ptr
#define fido_assert_set_clientdata_hash rollout_fido2_declared_fido_assert_set_clientdata_hash
#define fido_assert_set_rp rollout_fido2_declared_fido_assert_set_rp
#define fido_assert_set_up rollout_fido2_declared_fido_assert_set_up
#define fido_assert_set_uv rollout_fido2_declared_fido_assert_set_uv
#define fido_assert_sig_len rollout_fido2_declared_fido_assert_sig_len
#define fido_assert_sig_ptr rollout_fido2_declared_fido_assert_sig_ptr
#define fido_cred_flags rollout_fido2_declared_fido_cred_flags
#define fido_cred_id_len rollout_fido2_declared_fido_cred_id_len
#define fido_cred_id_ptr rollout_fido2_declared_fido_cred_id_ptr
#define fido_cred_pubkey_len rollout_fido2_declared_fido_cred_pubkey_len
#define fido_cred_pubkey_ptr rollout_fido2_declared_fido_cred_pubkey_ptr
#define fido_cred_set_clientdata_hash rollout_fido2_declared_fido_cred_set_clientdata_hash
#define fido_cred_set_rp rollout_fido2_declared_fido_cred_set_rp
#define fido_cred_set_type rollout_fido2_declared_fido_cred_set_type
#define fido_cred_set_user rollout_fido2_declared_fido_cred_set_user
#define fido_cred_set_uv rollout_fido2_declared_fido_cred_set_uv
#define fido_cred_sigcount rollout_fido2_declared_fido_cred_sigcount
#define fido_cred_verify rollout_fido2_declared_fido_cred_verify
#define fido_cred_verify_self rollout_fido2_declared_fido_cred_verify_self
#define fido_cred_x5c_len rollout_fido2_declared_fido_cred_x5c_len
#define fido_dev_cancel rollout_fido2_declared_fido_dev_cancel
#define fido_dev_close rollout_fido2_declared_fido_dev_close
#define fido_dev_get_assert rollout_fido2_declared_fido_dev_get_assert
#define fido_dev_info_manifest rollout_fido2_declared_fido_dev_info_manifest
#define fido_dev_info_path rollout_fido2_declared_fido_dev_info_path
#define fido_dev_info_ptr rollout_fido2_declared_fido_dev_info_ptr
#define fido_dev_io_handle rollout_fido2_declared_fido_dev_io_handle
#define fido_dev_make_cred rollout_fido2_declared_fido_dev_make_cred
#define fido_dev_open rollout_fido2_declared_fido_dev_open
#define fido_dev_set_io_functions rollout_fido2_declared_fido_dev_set_io_functions
#define fido_dev_set_timeout rollout_fido2_declared_fido_dev_set_timeout
#define fido_dev_set_transport_functions rollout_fido2_declared_fido_dev_set_transport_functions
#define fido_assert_free rollout_fido2_declared_fido_assert_free
#define fido_cred_free rollout_fido2_declared_fido_cred_free
#define fido_dev_free rollout_fido2_declared_fido_dev_free
#define fido_dev_info_free rollout_fido2_declared_fido_dev_info_free
#define fido_init rollout_fido2_declared_fido_init
#define fido_dev_new rollout_fido2_declared_fido_dev_new
#define fido_cred_new rollout_fido2_declared_fido_cred_new
#define fido_assert_new rollout_fido2_declared_fido_assert_new
#define fido_dev_info_new rollout_fido2_declared_fido_dev_info_new
#define fido_strerr rollout_fido2_declared_fido_strerr
#include <fido.h>
#undef fido_assert_allow_cred
#undef fido_assert_authdata_len
#undef fido_assert_authdata_ptr
#undef fido_assert_count
#undef fido_assert_id_len
#undef fido_assert_id_ptr
#undef fido_assert_set_clientdata_hash
#undef fido_assert_set_rp
#undef fido_assert_set_up
#undef fido_assert_set_uv
#undef fido_assert_sig_len
#undef fido_assert_sig_ptr
#undef fido_cred_flags
#undef fido_cred_id_len
#undef fido_cred_id_ptr
#undef fido_cred_pubkey_len
#undef fido_cred_pubkey_ptr
#undef fido_cred_set_clientdata_hash
#undef fido_cred_set_rp
#undef fido_cred_set_type
#undef fido_cred_set_user
#undef fido_cred_set_uv
#undef fido_cred_sigcount
#undef fido_cred_verify
#undef fido_cred_verify_self
#undef fido_cred_x5c_len
#undef fido_dev_cancel
#undef fido_dev_close
#undef fido_dev_get_assert
#undef fido_dev_info_manifest
#undef fido_dev_info_path
#undef fido_dev_info_ptr
#undef fido_dev_io_handle
#undef fido_dev_make_cred
#undef fido_dev_open
#undef fido_dev_set_io_functions
#undef fido_dev_set_timeout
#undef fido_dev_set_transport_functions
#undef fido_assert_free
#undef fido_cred_free
#undef fido_dev_free
#undef fido_dev_info_free
#undef fido_init
#undef fido_dev_new
#undef fido_cred_new
#undef fido_assert_new
#undef fido_dev_info_new
#undef fido_strerr

typedef struct {
    const char *failure;
    void (*fido_init)(int flags);
    const char *(*fido_strerr)(int n);
#define ROLLOUT_FIDO2_FIELD(ret, name, params, args) ret(*name) params;
    ROLLOUT_FIDO2_CONSTRUCTORS(ROLLOUT_FIDO2_FIELD)
    ROLLOUT_FIDO2_FUNCTIONS(ROLLOUT_FIDO2_FIELD)
#undef ROLLOUT_FIDO2_FIELD
#define ROLLOUT_FIDO2_VOID_FIELD(name, params, args) void(*name) params;
    ROLLOUT_FIDO2_VOID_FUNCTIONS(ROLLOUT_FIDO2_VOID_FIELD)
#undef ROLLOUT_FIDO2_VOID_FIELD
} rollout_fido2_api;

/// The table, defined once, in shim.c (Sources/CPostgres/include/shim.h says why it is not a static here).
extern rollout_fido2_api rollout_fido2_api_table;

/// The loaded table, or NULL when libfido2 is unavailable (then rollout_fido2_unavailable() says why).
/// Thread-safe: the first call opens libfido2 (pthread_once).
rollout_fido2_api *rollout_fido2(void);

/// Why libfido2 cannot be used, or NULL when it can.
static inline const char *rollout_fido2_unavailable(void) {
    return rollout_fido2() ? NULL : rollout_fido2_api_table.failure;
}

static inline void fido_init(int flags) {
    rollout_fido2_api *a = rollout_fido2();
    if (a) a->fido_init(flags);
}
#define ROLLOUT_FIDO2_CONSTRUCT(ret, name, params, args)                                                       \
    static inline ret name params {                                                                             \
        rollout_fido2_api *a = rollout_fido2();                                                                 \
        return a ? a->name args : NULL;                                                                         \
    }
ROLLOUT_FIDO2_CONSTRUCTORS(ROLLOUT_FIDO2_CONSTRUCT)
#undef ROLLOUT_FIDO2_CONSTRUCT
static inline const char *fido_strerr(int n) {
    rollout_fido2_api *a = rollout_fido2();
    return a ? a->fido_strerr(n) : rollout_fido2_api_table.failure;
}
#define ROLLOUT_FIDO2_FORWARD(ret, name, params, args)                                                         \
    static inline ret name params { return rollout_fido2_api_table.name args; }
ROLLOUT_FIDO2_FUNCTIONS(ROLLOUT_FIDO2_FORWARD)
#undef ROLLOUT_FIDO2_FORWARD
#define ROLLOUT_FIDO2_VOID_FORWARD(name, params, args)                                                         \
    static inline void name params { rollout_fido2_api_table.name args; }
ROLLOUT_FIDO2_VOID_FUNCTIONS(ROLLOUT_FIDO2_VOID_FORWARD)
#undef ROLLOUT_FIDO2_VOID_FORWARD
#endif
