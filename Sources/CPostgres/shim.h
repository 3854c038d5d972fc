#ifndef ROLLOUT_CPOSTGRES_SHIM_H
#define ROLLOUT_CPOSTGRES_SHIM_H
// libpq, the PostgreSQL client library (Debian: libpq-dev, headers in /usr/include/postgresql).
#include <postgresql/libpq-fe.h>
#endif
