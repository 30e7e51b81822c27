/* A job held for the tool (launch mode) prints, then waits in a function of its rank's:
 * "hello", the numbers 1 to N (argv[1], default 100), "rank R", "done", each line flushed;
 * then rank R sleeps forever below func_a, func_b or func_c as R % 3 is 0, 1 or 2. Its rank
 * comes from its launcher (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK). Built with
 * -DUSE_MPI (mpicc) it calls MPI_Init first: Open MPI's mpirun holds only MPI programs.
 * Built -O0 -g -fno-omit-frame-pointer. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

__attribute__((noinline)) void wait_here(void) {
    for (;;) sleep(1);
}
__attribute__((noinline)) void func_a(void) { wait_here(); }
__attribute__((noinline)) void func_b(void) { wait_here(); }
__attribute__((noinline)) void func_c(void) { wait_here(); }

static int rank_from_env(void) {
    const char *vars[] = {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (unsigned i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v);
    }
    return -1;
}

int main(int argc, char **argv) {
    int rank = rank_from_env();
#ifdef USE_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#endif
    int n = argc > 1 ? atoi(argv[1]) : 100;
    printf("hello\n");
    fflush(stdout);
    for (int k = 1; k <= n; k++) {
        printf("%d\n", k);
        fflush(stdout);
    }
    printf("rank %d\n", rank);
    printf("done\n");
    fflush(stdout);
    switch (rank % 3) {
    case 0: func_a(); break;
    case 1: func_b(); break;
    default: func_c(); break;
    }
    return 0;
}
