/* The detach test program (tests/tests/detach.rs): calls `work` in a loop until the file
 * named by its first argument exists, calls it once more, then exits 0. A process left
 * stopped, traced, or with a breakpoint in `work` never gets to its end. */
#include <stdlib.h>
#include <unistd.h>

int rank;
long total;

__attribute__((noinline)) long work(int i)
{
    long v = 2L * i; /* LINE_WORK */
    total += v;      /* LINE_WORK_NEXT */
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    rank = atoi(argv[2]);
    for (int i = 0;; i++) {
        int released = access(argv[1], F_OK) == 0;
        work(i);
        if (released)
            return 0;
        usleep(10000);
    }
}
