/* Test program for the sdm monitor: spins, blocks in distinct functions per rank, or
 * reaches a function only on odd ranks. Built with frame pointers and debug info. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile unsigned long counter;

__attribute__((noinline)) void spin(void) { for (;;) counter++; }
__attribute__((noinline)) void func_a(void) { spin(); }
__attribute__((noinline)) void func_b(void) { spin(); }
__attribute__((noinline)) void func_c(void) { spin(); }
__attribute__((noinline)) void reached_by_odd(void) { counter++; }

int main(int argc, char **argv) {
    const char *r = getenv("SDM_RANK");
    int rank = r ? atoi(r) : 0;
    const char *mode = argc > 1 ? argv[1] : "spin";
    if (strcmp(mode, "funcs") == 0) {
        switch (rank % 3) {
        case 0: func_a(); break;
        case 1: func_b(); break;
        default: func_c(); break;
        }
    } else if (strcmp(mode, "odd") == 0) {
        for (;;) {
            if (rank % 2) reached_by_odd();
            counter++;
            usleep(1000);
        }
    }
    spin();
    return 0;
}
