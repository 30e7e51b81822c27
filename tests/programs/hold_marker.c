/* A task of a job started held (tests/tests/hold.rs): the first thing main does is create
 * the file $SDM_HOLD_DIR/started.RANK (RANK from SLURM_PROCID), so a task that has passed
 * the start of main leaves a trace. Exits 0. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    char path[4096];
    const char *dir = getenv("SDM_HOLD_DIR");
    const char *rank = getenv("SLURM_PROCID");
    snprintf(path, sizeof path, "%s/started.%s", dir ? dir : ".", rank ? rank : "x");
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fclose(f);
    return 0;
}
