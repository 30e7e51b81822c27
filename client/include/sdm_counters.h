/* sdm_counters.h: a program's own counters, fed to the sdm server that started it.
 *
 * Header-only C client of the protocol in sdm/src/counters.rs: the server names a Unix
 * socket in SDM_COUNTERS; each line written there is `key value` and sets that counter
 * (the latest value wins). The tree merges the counters of every rank on request
 * (`counters` in the sdm console: min / mean / max and the ranks at the extremes).
 *
 *   int fd = sdm_counters_open();          // -1 if not started by an sdm server
 *   sdm_counter_set(fd, "iterations", 42);
 *   sdm_counters_close(fd);
 *
 * Keys are up to 128 characters of [A-Za-z0-9_.-]; values are finite numbers.
 */
#ifndef SDM_COUNTERS_H
#define SDM_COUNTERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Connects to the server's counters socket; returns a descriptor, or -1. */
static inline int sdm_counters_open(void) {
    const char *path = getenv("SDM_COUNTERS");
    struct sockaddr_un addr;
    int fd;
    if (path == NULL || strlen(path) >= sizeof addr.sun_path) return -1;
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sets counter `key` to `value`; returns 0, or -1 if the line could not be written. */
static inline int sdm_counter_set(int fd, const char *key, double value) {
    char line[192];
    int n = snprintf(line, sizeof line, "%s %.17g\n", key, value);
    if (fd < 0 || n <= 0 || (size_t)n >= sizeof line) return -1;
    return write(fd, line, (size_t)n) == n ? 0 : -1;
}

/* Closes the connection (the server keeps the last values). */
static inline void sdm_counters_close(int fd) {
    if (fd >= 0) close(fd);
}

#endif
