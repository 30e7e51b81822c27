/*
 * sum_plugin.c: an example sdm filter plugin in C. Filter "csum" adds decimal integers
 * (payloads such as "42"), like the built-in "sum" but in 64 bits. A payload that is not an
 * integer, or an overflow, fails the fold; parameters ("csum:x") fail the init.
 *
 * Build: cc -shared -fPIC -I filters/include filters/examples/c/sum_plugin.c -o libcsum.so
 * (the tests in filters/tests/plugins.rs do this). -DSDM_EXAMPLE_ABI=N claims ABI version N,
 * to test that the host refuses a mismatch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdm_filter.h"

#ifndef SDM_EXAMPLE_ABI
#define SDM_EXAMPLE_ABI SDM_FILTER_ABI_VERSION
#endif

typedef struct csum {
    long long total;
    int any;
    uint32_t *runs; /* pairs of inclusive ranges folded since the last flush */
    size_t nruns, cap;
} csum;

static int fail(const sdm_filter_host *host, const char *msg) {
    host->error(host->ctx, msg, strlen(msg));
    return 1;
}

static int csum_init(const sdm_filter_host *host, const uint8_t *params, size_t len,
                     void **state) {
    csum *s;
    (void)params;
    if (len > 0) return fail(host, "csum takes no parameters");
    s = calloc(1, sizeof *s);
    if (!s) return fail(host, "out of memory");
    *state = s;
    return 0;
}

/* Parses a whole payload as a decimal integer (surrounding whitespace allowed). */
static int parse(const uint8_t *p, size_t len, long long *out) {
    char buf[64];
    char *end;
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, p, len);
    buf[len] = 0;
    errno = 0;
    *out = strtoll(buf, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    if (errno || *end || end == buf) return -1;
    return 0;
}

static int csum_fold(void *state, const sdm_filter_host *host, const uint8_t *payload,
                     size_t len, const uint32_t *runs, size_t nruns) {
    csum *s = state;
    long long v, total;
    if (parse(payload, len, &v) != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "payload of %zu bytes is not a decimal integer", len);
        return fail(host, msg);
    }
    if (__builtin_add_overflow(s->total, v, &total))
        return fail(host, "64-bit overflow");
    if (s->nruns + nruns > s->cap) {
        size_t cap = (s->cap ? 2 * s->cap : 16) + nruns;
        uint32_t *r = realloc(s->runs, 2 * cap * sizeof *r);
        if (!r) return fail(host, "out of memory");
        s->runs = r;
        s->cap = cap;
    }
    memcpy(s->runs + 2 * s->nruns, runs, 2 * nruns * sizeof *runs);
    s->nruns += nruns;
    s->total = total;
    s->any = 1;
    return 0;
}

static int csum_flush(void *state, const sdm_filter_host *host) {
    csum *s = state;
    char buf[32];
    int n, rc = 0;
    if (s->any) {
        n = snprintf(buf, sizeof buf, "%lld", s->total);
        rc = host->emit(host->ctx, (const uint8_t *)buf, (size_t)n, s->runs, s->nruns);
    }
    s->total = 0;
    s->any = 0;
    s->nruns = 0;
    return rc;
}

static void csum_destroy(void *state) {
    csum *s = state;
    free(s->runs);
    free(s);
}

static const sdm_filter_vtable vtable = {
    .abi_version = SDM_EXAMPLE_ABI,
    .reserved = 0,
    .name = "csum",
    .init = csum_init,
    .fold = csum_fold,
    .flush = csum_flush,
    .finish = NULL,
    .destroy = csum_destroy,
};

const sdm_filter_vtable *sdm_filter_entry(void) { return &vtable; }
