/* MPI test program for stack walks through libmpi (tests/stacks.rs): the last rank spins in
 * compute(), the others wait in MPI_Barrier for ever, both called from step(). noipa keeps
 * each function a frame of its own; the work after the calls keeps them out of tail
 * position. */
#include <mpi.h>

volatile unsigned long counter;

__attribute__((noipa)) void compute(void) {
    for (;;)
        counter++;
}

__attribute__((noipa)) void step(int rank, int size) {
    if (rank == size - 1)
        compute();
    else
        MPI_Barrier(MPI_COMM_WORLD);
    counter++;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    step(rank, size);
    MPI_Finalize();
    return 0;
}
