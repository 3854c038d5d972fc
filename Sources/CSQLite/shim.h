#ifndef ROLLOUT_CSQLITE_SHIM_H
#define ROLLOUT_CSQLITE_SHIM_H
#include <sqlite3.h>
// SQLITE_TRANSIENT is a cast macro Swift cannot import.
static inline sqlite3_destructor_type rollout_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline sqlite3_destructor_type rollout_sqlite_static(void) { return SQLITE_STATIC; }
#endif
