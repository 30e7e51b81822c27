/* A real MPI job for the launcher tests: every rank contributes its rank to an
 * MPI_Allreduce and checks the sum, then the ranks pass a token around a ring, so both a
 * collective and point-to-point messages cross between the ranks. Prints one line per rank
 * (identical on every rank when all is well) and exits 0, or 1 on a wrong result. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0, token = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int want = size * (size - 1) / 2;
    if (size > 1) {
        int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        }
        /* Rank 0 holds the ring's count; everyone learns it. */
        MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    } else {
        token = 1;
    }
    int ok = sum == want && token == size;
    printf("size=%d allreduce=%d ring=%d %s\n", size, sum, token, ok ? "ok" : "WRONG");
    fflush(stdout);
    MPI_Finalize();
    return ok ? 0 : 1;
}
