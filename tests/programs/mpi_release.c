/* A hung MPI job that can be released (tests/tests/mpi.rs, detach after gdb-driven
 * commands): every rank but the last waits in MPI_Barrier; the last spins in compute()
 * until `go` is set (by the debugger: `print go = 1`), then all finish and exit 0. Prints
 * "ready" on every rank once MPI_Init is done. */
#include <mpi.h>
#include <stdio.h>

volatile int go;
volatile unsigned long work;

__attribute__((noipa)) void compute(void) {
    while (!go)
        work++;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("ready\n");
    fflush(stdout);
    if (rank == size - 1)
        compute();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
