#ifndef ROLLOUT_CSQLITE_SHIM_H
#define ROLLOUT_CSQLITE_SHIM_H
#include <sqlite3.h>
// SQLITE_TRANSIENT is a cast macro Swift cannot import.
static inline sqlite3_destructor_type rollout_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline sqlite3_destructor_type rollout_sqlite_static(void) { return SQLITE_STATIC; }
// Process-wide settings, before SQLite's first use (sqlite3_config is variadic, which Swift cannot call): no
// memory statistics, so every allocation and free inside SQLite skips the global allocator mutex and its
// counters (this process never reads them). Returns SQLITE_MISUSE, changing nothing, once SQLite is running.
static inline int rollout_sqlite_configure(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }
#endif
