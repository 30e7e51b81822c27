/*
 * threads.c: one sdm session used by several threads at once. Each thread sends its own
 * requests (`value`: server i answers i) to id-sets made from range strings, arrays and
 * bitmaps, some as send + collect, some as one sdm_request, and checks that every reply
 * accounts for exactly its destination. Prints "threads ok" and exits 0 when all did.
 *
 *   cc -pthread threads.c -Icapi/include -Ltarget/debug -lsdm -o threads
 *   LD_LIBRARY_PATH=target/debug SDM_BIN=target/debug/sdm ./threads 8 4 25
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdm.h"

static sdm_session *session;
static uint32_t servers;
static int rounds;

/* Checks that reply `r` covers `dest` exactly, each id once, every id replied with its
 * own number; returns 0 when it does, and says what is wrong when not. */
static int check(const sdm_reply *r, const sdm_idset *dest, int thread, int round) {
    uint8_t want[64] = {0}, seen[64] = {0};
    sdm_idset_to_bitmap(dest, want, sizeof want);
    for (size_t i = 0; i < sdm_reply_count(r); i++) {
        const sdm_aggregate *g = sdm_reply_group(r, i);
        size_t len = 0;
        const char *p = (const char *)sdm_aggregate_payload(g, &len);
        uint32_t ids[64];
        size_t n = sdm_idset_to_array(sdm_aggregate_idset(g), ids, 64);
        if (sdm_aggregate_status(g) != SDM_STATUS_REPLIED || n != 1) {
            fprintf(stderr, "thread %d round %d: group %zu: status %d, %zu ids: %.*s\n", thread,
                    round, i, sdm_aggregate_status(g), n, (int)len, p);
            return 1;
        }
        char own[16];
        snprintf(own, sizeof own, "%u", ids[0]);
        if (len != strlen(own) || memcmp(p, own, len) != 0) {
            fprintf(stderr, "thread %d round %d: id %u answered %.*s\n", thread, round, ids[0],
                    (int)len, p);
            return 1;
        }
        if (seen[ids[0] / 8] & (1u << (ids[0] % 8))) {
            fprintf(stderr, "thread %d round %d: id %u twice\n", thread, round, ids[0]);
            return 1;
        }
        seen[ids[0] / 8] |= (uint8_t)(1u << (ids[0] % 8));
    }
    if (memcmp(want, seen, sizeof want) != 0) {
        fprintf(stderr, "thread %d round %d: replies do not cover the destination\n", thread,
                round);
        return 1;
    }
    return 0;
}

static void *run(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int k = 0; k < rounds; k++) {
        sdm_idset *dest = NULL;
        uint32_t a = (uint32_t)(t + k) % servers, b = (uint32_t)(t * 7 + k * 3) % servers;
        if (k % 3 == 0) {
            char text[64];
            snprintf(text, sizeof text, "[%u,%u]", a, b);
            if (sdm_idset_parse(text, &dest) != SDM_OK) return (void *)1;
        } else if (k % 3 == 1) {
            uint32_t ids[2] = {b, a};
            dest = sdm_idset_from_array(ids, 2);
        } else {
            uint8_t bits[64] = {0};
            bits[a / 8] |= (uint8_t)(1u << (a % 8));
            bits[b / 8] |= (uint8_t)(1u << (b % 8));
            dest = sdm_idset_from_bitmap(bits, sizeof bits);
        }
        sdm_reply *r = NULL;
        int rc;
        if (k % 2 == 0) {
            rc = sdm_request(session, dest, NULL, NULL, SDM_SYNC_WAIT_ALL, 0,
                             (const uint8_t *)"value", 5, &r);
        } else {
            uint64_t op = 0;
            rc = sdm_message_send(session, dest, "", "", SDM_SYNC_DONT_WAIT, 0,
                                  (const uint8_t *)"value", 5, &op);
            if (rc == SDM_OK) rc = sdm_aggregate_collect(session, op, &r);
        }
        if (rc != SDM_OK) {
            fprintf(stderr, "thread %d round %d: %d %s\n", t, k, rc, sdm_last_error());
            sdm_idset_free(dest);
            return (void *)1;
        }
        int bad = check(r, dest, t, k);
        sdm_reply_free(r);
        sdm_idset_free(dest);
        if (bad) return (void *)1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    servers = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 8;
    int nthreads = argc > 2 ? atoi(argv[2]) : 4;
    rounds = argc > 3 ? atoi(argv[3]) : 25;
    if (servers == 0 || servers > 512 || nthreads < 1 || nthreads > 64) return 2;

    sdm_options *o = sdm_options_new();
    sdm_options_set_n(o, servers);
    int rc = sdm_init(o, &session);
    sdm_options_free(o);
    if (rc != SDM_OK) {
        fprintf(stderr, "launch: %s\n", sdm_last_error());
        return 1;
    }
    pthread_t threads[64];
    for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], NULL, run, (void *)(intptr_t)t);
    int failed = 0;
    for (int t = 0; t < nthreads; t++) {
        void *res = NULL;
        pthread_join(threads[t], &res);
        failed += res != NULL;
    }
    sdm_finalize(session, 10000);
    if (failed) return 1;
    printf("threads ok: %d threads x %d requests\n", nthreads, rounds);
    return 0;
}
