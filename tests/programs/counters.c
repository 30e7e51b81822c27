/* Test program: sets counters from its rank, then sleeps (see sdm/include/sdm_counters.h). */
#include <stdlib.h>
#include <unistd.h>

#include "sdm_counters.h"

int main(void) {
    const char *r = getenv("SDM_RANK");
    int rank = r ? atoi(r) : 0;
    int fd = sdm_counters_open();
    if (fd < 0) return 2;
    sdm_counter_set(fd, "iterations", (rank + 1) * 10);
    sdm_counter_set(fd, "bytes_sent", 4096);
    sdm_counter_set(fd, "bad/key", 1); /* refused by the server, costs only this line */
    sdm_counter_set(fd, "iterations", (rank + 1) * 100); /* the latest value wins */
    sdm_counters_close(fd);
    pause();
    return 0;
}
