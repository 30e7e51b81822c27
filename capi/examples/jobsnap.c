/*
 * jobsnap.c: LaunchMON's Jobsnap on sdm, in C through libsdm. Launches N servers, asks
 * every one for its process info (the built-in `info` request), prints one row per rank
 * and how every rank was accounted (replied, lost, timed out).
 *
 *   cc jobsnap.c -Icapi/include -Ltarget/debug -lsdm -o jobsnap
 *   LD_LIBRARY_PATH=target/debug SDM_BIN=target/debug/sdm ./jobsnap 8 [local|mpirun|srun]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdm.h"

/* The value of `key=` in an info line ("host=h pid=12 rss_kb=3400 load=0.1"), or "?". */
static void field(const char *line, size_t len, const char *key, char *out, size_t cap) {
    size_t klen = strlen(key);
    snprintf(out, cap, "?");
    for (size_t i = 0; i + klen < len; i++) {
        if ((i == 0 || line[i - 1] == ' ') && strncmp(line + i, key, klen) == 0 &&
            line[i + klen] == '=') {
            size_t start = i + klen + 1, end = start;
            while (end < len && line[end] != ' ') end++;
            snprintf(out, cap, "%.*s", (int)(end - start), line + start);
            return;
        }
    }
}

static int fail(const char *what) {
    fprintf(stderr, "jobsnap: %s: %s\n", what, sdm_last_error());
    return 1;
}

int main(int argc, char **argv) {
    uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 8;
    const char *launcher = argc > 2 ? argv[2] : "local";

    sdm_options *o = sdm_options_new();
    if (sdm_options_set_n(o, n) != SDM_OK || sdm_options_set_launcher(o, launcher) != SDM_OK)
        return fail("options");
    sdm_session *s = NULL;
    int rc = sdm_init(o, &s);
    sdm_options_free(o);
    if (rc != SDM_OK) return fail("launch");

    sdm_idset *ready = sdm_session_ready(s);
    char *ready_text = sdm_idset_to_string(ready);
    printf("%llu of %u servers ready: %s\n", (unsigned long long)sdm_idset_size(ready), n,
           ready_text);
    sdm_string_free(ready_text);

    sdm_reply *r = NULL;
    /* Empty service tag: the built-in requests of every sdm server. */
    if (sdm_request(s, ready, "", NULL, SDM_SYNC_TIMEOUT, 10000, (const uint8_t *)"info", 4,
                    &r) != SDM_OK) {
        sdm_idset_free(ready);
        sdm_finalize(s, 10000);
        return fail("info request");
    }

    /* One row per rank; `accounted` is every rank some group covers, as a bitmap. */
    size_t bitmap_len = n / 8 + 1;
    uint8_t *accounted = calloc(bitmap_len, 1);
    printf("%-6s %-20s %8s %10s %s\n", "rank", "host", "pid", "rss_kb", "status");
    for (size_t i = 0; i < sdm_reply_count(r); i++) {
        const sdm_aggregate *g = sdm_reply_group(r, i);
        const sdm_idset *ids = sdm_aggregate_idset(g);
        size_t len = 0;
        const char *text = (const char *)sdm_aggregate_payload(g, &len);
        size_t count = sdm_idset_to_array(ids, NULL, 0);
        uint32_t *ranks = calloc(count ? count : 1, sizeof(uint32_t));
        sdm_idset_to_array(ids, ranks, count);
        char host[64], pid[32], rss[32];
        field(text, len, "host", host, sizeof host);
        field(text, len, "pid", pid, sizeof pid);
        field(text, len, "rss_kb", rss, sizeof rss);
        for (size_t k = 0; k < count; k++) {
            if (ranks[k] / 8 < bitmap_len) accounted[ranks[k] / 8] |= (uint8_t)(1u << (ranks[k] % 8));
            switch (sdm_aggregate_status(g)) {
            case SDM_STATUS_REPLIED:
                printf("%-6u %-20s %8s %10s replied\n", ranks[k], host, pid, rss);
                break;
            case SDM_STATUS_LOST:
                printf("%-6u %-20s %8s %10s lost: %.*s\n", ranks[k], "-", "-", "-", (int)len, text);
                break;
            case SDM_STATUS_ERROR:
                printf("%-6u %-20s %8s %10s error: %.*s\n", ranks[k], "-", "-", "-", (int)len, text);
                break;
            default:
                printf("%-6u %-20s %8s %10s timed out\n", ranks[k], "-", "-", "-");
            }
        }
        free(ranks);
    }
    sdm_idset *seen = sdm_idset_from_bitmap(accounted, bitmap_len);
    char *seen_text = sdm_idset_to_string(seen);
    printf("accounted: %s\n", seen_text);
    sdm_string_free(seen_text);
    sdm_idset_free(seen);
    free(accounted);
    sdm_reply_free(r);
    sdm_idset_free(ready);
    return sdm_finalize(s, 10000) == SDM_OK ? 0 : fail("shutdown");
}
