/*
 * sdm_service.h: the C ABI of sdm service plugins (ABI version 1).
 *
 * A service plugin adds a request type of a tool's own to every sdm server: commands the
 * front-end tags with the plugin's name (sdm_proto::Message::service, `sdm launch --service`)
 * reach its `handle` with their payload bytes exactly as sent (no text decoding: any bytes,
 * NUL included). The front-end names plugins with `--service-plugin PATH` or
 * sdm_client::SessionOptions::service_plugins; every server loads them when the init command
 * arrives, before it answers `ready`. A plugin that does not load is logged, and commands for
 * an unknown service get an error reply naming the plugin and why.
 *
 * The library exports one function,
 *
 *     const sdm_service_vtable *sdm_service_entry(void);
 *
 * returning a pointer to a static vtable. The host reads `abi_version` first and refuses the
 * plugin unless it equals the host's SDM_SERVICE_ABI_VERSION (the layout below may change
 * between versions; `abi_version` stays the first field forever).
 *
 * Life of a plugin in one server:
 *
 *     init(host, &state)                      once, at load; host->pid is 0 and reply must
 *                                             not be called; non-zero: the plugin does not
 *                                             load (say why with host->error)
 *     handle(state, host, request, len)       once per command: answer with exactly one
 *                                             host->reply before returning 0, or call
 *                                             host->error and return non-zero
 *     destroy(state)                          once, when the plugin is unloaded (the
 *                                             server ends, or init failed), with the state
 *                                             init set, possibly NULL; may be NULL
 *
 * The host struct of a handle call gives this server's id and the monitored program's pid
 * (0 if the server controls no program). Buffers are pointer + length, owned by the caller
 * and valid only during the call: copy what you keep. The front-end sees a failed call as an
 * error group (status error) with the text `service "<name>": plugin <path>: <message>`
 * (identical errors of many servers merge into one group). A handle that returns 0
 * without replying gets an error reply too.
 *
 * Threads: the host calls one plugin from one thread at a time (never concurrently), not
 * always the same thread; handle may block for a while (it runs off the node's event loop),
 * but a server answers its plugin's commands one by one. Rust plugins must catch panics at
 * this boundary (std::panic::catch_unwind) and return non-zero: a panic unwinding into the
 * host aborts the process.
 */
#ifndef SDM_SERVICE_H
#define SDM_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SDM_SERVICE_ABI_VERSION 1u
#define SDM_SERVICE_ENTRY_SYMBOL "sdm_service_entry"

/* What the host offers a plugin during a call. */
typedef struct sdm_service_host {
    void *ctx;
    /* This server's id (0..N-1). */
    uint32_t server_id;
    /* The monitored program's pid; 0 if none (and always 0 during init). */
    uint32_t pid;
    /* Sends this server's reply to the command being handled (once; during handle only). */
    void (*reply)(void *ctx, const uint8_t *payload, size_t len);
    /* Records why the current call fails (UTF-8, need not be NUL-terminated). */
    void (*error)(void *ctx, const char *msg, size_t len);
} sdm_service_host;

typedef struct sdm_service_vtable {
    uint32_t abi_version; /* SDM_SERVICE_ABI_VERSION */
    uint32_t reserved;    /* 0 */
    const char *name;     /* NUL-terminated service name: the tag commands carry */
    int (*init)(const sdm_service_host *host, void **state);
    int (*handle)(void *state, const sdm_service_host *host, const uint8_t *request,
                  size_t len);
    void (*destroy)(void *state); /* may be NULL */
} sdm_service_vtable;

typedef const sdm_service_vtable *(*sdm_service_entry_fn)(void);

const sdm_service_vtable *sdm_service_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* SDM_SERVICE_H */
