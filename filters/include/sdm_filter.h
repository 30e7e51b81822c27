/*
 * sdm_filter.h: the C ABI of sdm filter plugins (ABI version 1).
 *
 * A plugin is a shared library that exports one function,
 *
 *     const sdm_filter_vtable *sdm_filter_entry(void);
 *
 * returning a pointer to a static vtable. The host reads `abi_version` first and refuses the
 * plugin unless it equals the host's SDM_FILTER_ABI_VERSION (the layout below may change
 * between versions; `abi_version` stays the first field forever).
 *
 * Life of one filter instance (one per operation or stream wave at one tree node):
 *
 *     init(host, params, params_len, &state)       once; params are the bytes after
 *                                                  "name:" in the filter spec (may be empty)
 *     fold(state, host, payload, len, runs, nruns) once per reply group
 *     flush(state, host)                           send groups upward with host->emit, then
 *                                                  reset; may be called many times
 *     finish(state, host)                          at the front-end, once (NULL: flush)
 *     destroy(state)                               once for every non-NULL state init
 *                                                  set (even if init then failed)
 *
 * Ids: an id-set is passed as `nruns` inclusive ranges, `runs[2*i] ..= runs[2*i+1]`, sorted
 * and disjoint (`[0-3,7]` is {0,3, 7,7}, nruns 2). Buffers are pointer + length, owned by the
 * caller and valid only during the call: copy what you keep.
 *
 * Errors: every call but destroy returns 0 on success. On failure return non-zero, after
 * calling host->error with a message if you can; the host fails that operation with
 * `filter "<name>": plugin <name>: <message>` and carries on. A failed fold must leave the
 * state as it was. Rust plugins must catch panics at this boundary (std::panic::catch_unwind)
 * and return non-zero: a panic unwinding into the host aborts the process.
 *
 * Contract (as for built-in filters): the groups a flush emits must have disjoint id-sets
 * whose union is every id folded since the last flush; folding emitted groups into a fresh
 * instance and flushing again must give the same result as folding the inputs directly.
 *
 * Threads: the host may call one instance from different threads, never concurrently.
 * Different instances may run concurrently.
 */
#ifndef SDM_FILTER_H
#define SDM_FILTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SDM_FILTER_ABI_VERSION 1u
#define SDM_FILTER_ENTRY_SYMBOL "sdm_filter_entry"

/* What the host offers a plugin during a call. */
typedef struct sdm_filter_host {
    void *ctx;
    /* Sends one group upward (valid during flush and finish only). Returns 0 on success. */
    int (*emit)(void *ctx, const uint8_t *payload, size_t len, const uint32_t *runs,
                size_t nruns);
    /* Records why the current call fails (UTF-8, need not be NUL-terminated). */
    void (*error)(void *ctx, const char *msg, size_t len);
} sdm_filter_host;

typedef struct sdm_filter_vtable {
    uint32_t abi_version; /* SDM_FILTER_ABI_VERSION */
    uint32_t reserved;    /* 0 */
    const char *name;     /* NUL-terminated; the registry name: no ':' */
    int (*init)(const sdm_filter_host *host, const uint8_t *params, size_t params_len,
                void **state);
    int (*fold)(void *state, const sdm_filter_host *host, const uint8_t *payload, size_t len,
                const uint32_t *runs, size_t nruns);
    int (*flush)(void *state, const sdm_filter_host *host);
    int (*finish)(void *state, const sdm_filter_host *host); /* may be NULL */
    void (*destroy)(void *state);
} sdm_filter_vtable;

typedef const sdm_filter_vtable *(*sdm_filter_entry_fn)(void);

const sdm_filter_vtable *sdm_filter_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* SDM_FILTER_H */
