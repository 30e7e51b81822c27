/* A hung MPI job, the case STAT exists for: every rank but the last waits in MPI_Barrier
 * called from step(); the last rank never arrives, spinning in compute() called from
 * step(). Prints "ready" on every rank once MPI_Init is done. Built -O2 -g: the tests
 * expect main > step > ...Barrier... and main > step > compute. */
#include <mpi.h>
#include <stdio.h>

volatile unsigned long work;

__attribute__((noipa)) void compute(void) {
    for (;;) work++;
}

__attribute__((noipa)) void step(int rank, int size) {
    if (rank == size - 1)
        compute();
    MPI_Barrier(MPI_COMM_WORLD);
    /* Work after the call keeps it a call, not a tail jump: step stays on the stack. */
    work++;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("ready\n");
    fflush(stdout);
    step(rank, size);
    MPI_Finalize();
    return 0;
}
