/*
 * prun.c: a parallel run in C through libsdm. Launches N servers, starts the program given
 * on the command line under each one, and prints its merged output as it comes through
 * the sdm_iof handlers ("[0-3] out: line", "[0-3] err: line") until every program ended
 * (the events "[ranks] event: process_terminated(...)").
 *
 *   cc prun.c -Icapi/include -Ltarget/debug -lsdm -o prun
 *   LD_LIBRARY_PATH=target/debug SDM_BIN=target/debug/sdm ./prun 4 sh -c 'echo hi'
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdm.h"

static void line(const sdm_idset *ranks, const uint8_t *text, size_t len, void *user) {
    char *ids = sdm_idset_to_string(ranks);
    printf("%s %s: %.*s\n", ids, (const char *)user, (int)len, (const char *)text);
    sdm_string_free(ids);
}

static void event(const sdm_idset *ranks, const char *text, void *user) {
    char *ids = sdm_idset_to_string(ranks);
    printf("%s event: %s\n", ids, text);
    sdm_string_free(ids);
    if (strncmp(text, "process_terminated", 18) == 0) {
        /* `user` is the set of ranks whose program ended. */
        uint32_t got[1024];
        size_t n = sdm_idset_to_array(ranks, got, 1024);
        for (size_t i = 0; i < n && i < 1024; i++) sdm_idset_add((sdm_idset *)user, got[i]);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: prun N PROGRAM [ARGS...]\n");
        return 2;
    }
    uint32_t n = (uint32_t)strtoul(argv[1], NULL, 10);
    sdm_options *o = sdm_options_new();
    if (sdm_options_set_n(o, n) != SDM_OK ||
        sdm_options_set_program(o, (size_t)(argc - 2), (const char *const *)argv + 2) != SDM_OK) {
        fprintf(stderr, "prun: options: %s\n", sdm_last_error());
        return 1;
    }
    sdm_session *s = NULL;
    int rc = sdm_init(o, &s);
    sdm_options_free(o);
    if (rc != SDM_OK) {
        fprintf(stderr, "prun: launch: %s\n", sdm_last_error());
        return 1;
    }
    sdm_idset *ended = sdm_idset_new();
    sdm_idset *ready = sdm_session_ready(s);
    sdm_iof_set_stdout_handler(s, line, "out");
    sdm_iof_set_stderr_handler(s, line, "err");
    sdm_iof_set_event_handler(s, event, ended);
    /* The programs read nothing: end their input so those that read see EOF. */
    sdm_iof_write_stdin(s, ready, NULL, 0, true);
    while (sdm_idset_size(ended) < sdm_idset_size(ready)) {
        rc = sdm_iof_progress(s, 200);
        if (rc != SDM_OK) {
            fprintf(stderr, "prun: %s\n", sdm_last_error());
            break;
        }
    }
    sdm_iof_flush(s);
    fflush(stdout);
    sdm_idset_free(ready);
    sdm_idset_free(ended);
    sdm_finalize(s, 10000);
    return rc == SDM_OK ? 0 : 1;
}
