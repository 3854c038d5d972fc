#ifndef ROLLOUT_COPENSSL_SHIM_H
#define ROLLOUT_COPENSSL_SHIM_H
// The low-level SHA-256 API is deprecated in OpenSSL 3 but is the fastest one-shot path; keep it visible.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/sha.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <openssl/pem.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/rsa.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/asn1.h>
#include <openssl/objects.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/engine.h>
#include <openssl/provider.h>
// SHA-256 and SHA-1 as "legacy" EVP_MDs over the low-level block functions, for HMAC_CTX. OpenSSL 3 runs an
// EVP_MD made with EVP_MD_meth_new on its legacy path, without fetching an implementation from a provider: the
// first fetch of a process builds the provider name map, about 4 million instructions, a sixth of a whole
// `rollout nudge`. The digests and the HMAC are still OpenSSL's own code.
static inline int rollout_sha256_init(EVP_MD_CTX *c) { return SHA256_Init((SHA256_CTX *)EVP_MD_CTX_md_data(c)); }
static inline int rollout_sha256_update(EVP_MD_CTX *c, const void *d, size_t n) {
    return SHA256_Update((SHA256_CTX *)EVP_MD_CTX_md_data(c), d, n);
}
static inline int rollout_sha256_final(EVP_MD_CTX *c, unsigned char *md) {
    return SHA256_Final(md, (SHA256_CTX *)EVP_MD_CTX_md_data(c));
}
static inline int rollout_sha1_init(EVP_MD_CTX *c) { return SHA1_Init((SHA_CTX *)EVP_MD_CTX_md_data(c)); }
static inline int rollout_sha1_update(EVP_MD_CTX *c, const void *d, size_t n) {
    return SHA1_Update((SHA_CTX *)EVP_MD_CTX_md_data(c), d, n);
}
static inline int rollout_sha1_final(EVP_MD_CTX *c, unsigned char *md) {
    return SHA1_Final(md, (SHA_CTX *)EVP_MD_CTX_md_data(c));
}
/// A new legacy EVP_MD: sha256 != 0 for SHA-256, else SHA-1. NULL when OpenSSL refuses.
static inline EVP_MD *rollout_legacy_md_new(int sha256) {
    EVP_MD *md = EVP_MD_meth_new(sha256 ? NID_sha256 : NID_sha1, NID_undef);
    if (md == NULL) return NULL;
    int ok = EVP_MD_meth_set_result_size(md, sha256 ? SHA256_DIGEST_LENGTH : SHA_DIGEST_LENGTH)
        && EVP_MD_meth_set_input_blocksize(md, sha256 ? SHA256_CBLOCK : SHA_CBLOCK)
        && EVP_MD_meth_set_app_datasize(md, sha256 ? (int)sizeof(SHA256_CTX) : (int)sizeof(SHA_CTX))
        && EVP_MD_meth_set_init(md, sha256 ? rollout_sha256_init : rollout_sha1_init)
        && EVP_MD_meth_set_update(md, sha256 ? rollout_sha256_update : rollout_sha1_update)
        && EVP_MD_meth_set_final(md, sha256 ? rollout_sha256_final : rollout_sha1_final);
    if (!ok) { EVP_MD_meth_free(md); return NULL; }
    return md;
}
// An ENGINE that offers those two digests, handed to HMAC_Init_ex. With no ENGINE given, OpenSSL 3 asks its
// engine table whether one is reserved for the digest, and that first asks the process to load openssl.cnf
// (about 1.9 million instructions: the file, its modules and libcrypto's error strings), which the one HMAC of
// a short-lived command never needs. Naming our own ENGINE skips that question; nothing process-wide changes,
// so a later TLS client still loads the system configuration as usual.
// The digests the ENGINE hands out, set once by rollout_legacy_engine_new before the ENGINE exists (a
// function's static: Swift emits no file-scope variable of an imported header, and only Crypto calls these).
static inline const EVP_MD **rollout_engine_digest(int sha256) {
    static const EVP_MD *digests[2];
    return &digests[sha256 != 0];
}
static inline int rollout_legacy_digests(ENGINE *e, const EVP_MD **out, const int **nids, int nid) {
    static const int list[] = { NID_sha256, NID_sha1 };
    (void)e;
    if (out == NULL) { *nids = list; return 2; }
    *out = nid == NID_sha256 ? *rollout_engine_digest(1) : nid == NID_sha1 ? *rollout_engine_digest(0) : NULL;
    return *out != NULL;
}
/// The ENGINE for the two legacy digests (made by rollout_legacy_md_new), or NULL when OpenSSL refuses one.
static inline ENGINE *rollout_legacy_engine_new(const EVP_MD *sha256, const EVP_MD *sha1) {
    *rollout_engine_digest(1) = sha256;
    *rollout_engine_digest(0) = sha1;
    ENGINE *e = ENGINE_new();
    if (e == NULL) return NULL;
    if (!ENGINE_set_id(e, "rollout-digests") || !ENGINE_set_name(e, "rollout's legacy SHA-1 and SHA-256")
        || !ENGINE_set_digests(e, rollout_legacy_digests)) { ENGINE_free(e); return NULL; }
    return e;
}
// The kernel's random source, beside libcrypto (Crypto's SecureRandom).
#include <sys/random.h>
#endif
