/* An MPI job started held (tests/tests/hold.rs): main creates $SDM_HOLD_DIR/before.RANK
 * first thing (RANK from OMPI_COMM_WORLD_RANK), then $SDM_HOLD_DIR/after.RANK as soon as
 * MPI_Init returns, so the files show how far each rank got; after.RANK holds the
 * TracerPid line of /proc/self/status then (a job released before its ranks were
 * attached passes MPI_Init untraced). Exits 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes this process's TracerPid line to `f`. */
static void tracer(FILE *f)
{
    char line[256];
    FILE *st = fopen("/proc/self/status", "r");
    if (!st)
        return;
    while (fgets(line, sizeof line, st))
        if (strncmp(line, "TracerPid:", 10) == 0)
            fputs(line, f);
    fclose(st);
}

static int mark(const char *what, const char *rank)
{
    char path[4096];
    const char *dir = getenv("SDM_HOLD_DIR");
    snprintf(path, sizeof path, "%s/%s.%s", dir ? dir : ".", what, rank ? rank : "x");
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    if (strcmp(what, "after") == 0)
        tracer(f);
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    char rank[16];
    int r;
    if (mark("before", getenv("OMPI_COMM_WORLD_RANK")))
        return 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    snprintf(rank, sizeof rank, "%d", r);
    if (mark("after", rank))
        return 1;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
