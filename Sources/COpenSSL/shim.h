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
// The kernel's random source, beside libcrypto (Crypto's SecureRandom).
#include <sys/random.h>
#endif
