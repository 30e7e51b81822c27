/* Test program for stack walks compared with gdb's: waits forever in one of three places,
 * chosen by argv[1] (built -O0, -O2 and -O2 -fomit-frame-pointer by tests/stacks.rs):
 *   chain:  main > top > mid > leaf > spin (inlined into leaf), spinning
 *   sleep:  main > sleeper > nanosleep (libc), asleep
 *   signal: main > wait_loop, interrupted by SIGALRM whose handler on_alarm spins
 *   vdso:   main > clock_loop > clock_gettime, often in the vdso's code
 * noipa keeps each function a frame of its own (no inlining, cloning or IPA), and the work
 * after each call keeps the calls out of tail position. */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long counter;
volatile sig_atomic_t done;

/* Inlined even at -O0: shows as an inline frame at leaf's pc. The store before the loop
 * keeps the loop off the inlined block's first instruction (gdb hides an inline frame
 * whose entry the pc is at). */
static inline __attribute__((always_inline)) void spin(void) {
    counter = 1;
    while (!done)
        counter++;
}

__attribute__((noipa)) void leaf(void) {
    spin();
    counter++;
}

__attribute__((noipa)) void mid(void) {
    leaf();
    counter++;
}

__attribute__((noipa)) void top(void) {
    mid();
    counter++;
}

__attribute__((noipa)) void sleeper(void) {
    struct timespec t = {1000000, 0};
    while (!done)
        nanosleep(&t, 0);
    counter++;
}

__attribute__((noipa)) void on_alarm(int sig) {
    (void)sig;
    while (!done)
        counter++;
}

__attribute__((noipa)) void wait_loop(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    alarm(1);
    while (!done)
        counter++;
    counter++;
}

__attribute__((noipa)) void clock_loop(void) {
    struct timespec t;
    while (!done)
        clock_gettime(CLOCK_MONOTONIC, &t);
    counter++;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "chain";
    if (strcmp(mode, "sleep") == 0)
        sleeper();
    else if (strcmp(mode, "signal") == 0)
        wait_loop();
    else if (strcmp(mode, "vdso") == 0)
        clock_loop();
    else
        top();
    return (int)(counter & 1);
}
