/* The debugger test program (tests/tests/debugger.rs): each rank (SDM_RANK, set by the
 * monitor) fills a per-rank array and loops over `i`, calling `work` once per step, then
 * waits for ever. The marker comments name the lines the test stops at. */
#include <stdlib.h>
#include <unistd.h>

int rank;
int a[8];
long total;

__attribute__((noinline)) int work(int i)
{
    int v = a[rank] * i; /* LINE_WORK */
    total += v;          /* LINE_WORK_NEXT */
    return v;
}

int main(void)
{
    const char *r = getenv("SDM_RANK");
    rank = r ? atoi(r) : 0;
    for (int k = 0; k < 8; k++)
        a[k] = 100 * rank + k;
    for (int i = 0; i < 5; i++) {
        work(i); /* LINE_CALL */
    }
    for (;;)
        sleep(1); /* LINE_WAIT */
    return 0;
}
