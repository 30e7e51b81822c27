/* Test program for CPU flame graphs (tests/flame.rs): each rank's helper thread sleeps in
 * idle_wait for good, its main thread burns CPU in burn, called from busy_work, once the
 * helper is asleep. A CPU profile counts the main threads only. Built -O0 -g. With
 * SDM_TEST_READY_DIR set, creates the file DIR/RANK (RANK from SDM_RANK) when it starts
 * burning, so a test knows every rank is busy. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile unsigned long counter;
volatile pid_t helper_tid;

__attribute__((noipa)) void *idle_wait(void *arg)
{
    (void)arg;
    helper_tid = (pid_t)syscall(SYS_gettid);
    for (;;)
        pause();
    return 0;
}

__attribute__((noipa)) void burn(void)
{
    for (;;)
        counter++;
}

__attribute__((noipa)) void busy_work(void)
{
    burn();
}

/* Whether thread `tid` of this process sleeps (state S in /proc). */
static int asleep(pid_t tid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = 0;
    char *close = 0;
    for (char *p = stat; *p; p++)
        if (*p == ')')
            close = p;
    return close && close[1] == ' ' && close[2] == 'S';
}

int main(void)
{
    pthread_t helper;
    pthread_create(&helper, 0, idle_wait, 0);
    while (!helper_tid || !asleep(helper_tid))
        usleep(1000);
    const char *dir = getenv("SDM_TEST_READY_DIR"), *rank = getenv("SDM_RANK");
    if (dir && rank) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, rank);
        FILE *f = fopen(path, "w");
        if (f)
            fclose(f);
    }
    busy_work();
    return 0;
}
