/* Test program for stacks of every thread and classes by call site (tests/stacks.rs): each
 * rank (SDM_RANK, set by the monitor) starts a helper thread that sleeps in helper_wait,
 * then its main thread waits in wait_here, called from one of two call sites: even ranks
 * from the first, odd ranks from the second. The marker comments name the lines the test
 * expects. Built -O0 -g, so the two calls stay two. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

int rank;
volatile unsigned long counter;

__attribute__((noipa)) void wait_here(void)
{
    for (;;)
        pause(); /* LINE_PAUSE */
}

__attribute__((noipa)) void *helper_wait(void *arg)
{
    (void)arg;
    for (;;)
        sleep(1000); /* LINE_HELPER */
    return 0;
}

int main(void)
{
    const char *r = getenv("SDM_RANK");
    rank = r ? atoi(r) : 0;
    pthread_t helper;
    pthread_create(&helper, 0, helper_wait, 0);
    if (rank % 2 == 0)
        wait_here(); /* LINE_SITE_EVEN */
    else
        wait_here(); /* LINE_SITE_ODD */
    counter++;
    return 0;
}
