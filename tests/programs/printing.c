/* The native print test program (tests/tests/native_print.rs): globals, file statics and a
 * struct with nested members of every kind the server's native evaluator prints; each rank
 * (SDM_RANK) fills them with its own values, calls `visit`, says `ready` and spins there
 * (no calls, so a stop lands in `visit`, in its inner block) until `released` is set. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum color { RED, GREEN = 5, BLUE };
typedef unsigned short ushort_t;

struct inner {
    int a;
    short pair[2];
};

struct record {
    int id;
    unsigned int flags;
    long negative;
    char letter;
    bool on;
    enum color hue;
    struct inner in;
    int values[12];
    int *heap;
    const char *name;
    char tag[8];
    ushort_t small;
    struct record *next;
    unsigned char byte;
    signed char sbyte;
    long long big;
    unsigned long long ubig;
    float ratio;
    double weight;
};

int rank;
long total = -42;
static int file_static = 7;
struct record rec;
struct record *recp;
int zeros[300];
int runs[24];
char message[16] = "hello";
const volatile int cv = 3;
ushort_t typed = 65535;
enum color unnamed_value;
bool yes = true;
int grid[2][3] = {{1, 2, 3}, {4, 5, 6}};
char reps[40] = "aaaaaaaaaaaaaaab";
char exact[3] = "abc";
volatile int released;
double darr[4] = {1.5, 2, 0.1, 1e17};
float third = 1.0f / 3;

__attribute__((noinline)) int visit(int depth, struct record *r)
{
    int local = depth * 10 + rank;
    static int calls;
    calls++;
    {
        long inner_local = local + 1;
        printf("ready\n");
        fflush(stdout);
        while (!released)
            ;
        total += inner_local;
    }
    return local + r->id;
}

int main(void)
{
    const char *s = getenv("SDM_RANK");
    rank = s ? atoi(s) : 0;
    rec.id = 1000 + rank;
    rec.flags = 0xdeadbeef;
    rec.negative = -5 - rank;
    rec.letter = 'A' + rank;
    rec.on = rank % 2 == 0;
    rec.hue = BLUE;
    rec.in.a = -rank;
    rec.in.pair[0] = 3;
    rec.in.pair[1] = -4;
    for (int k = 0; k < 12; k++)
        rec.values[k] = k < 2 ? k : 9;
    rec.heap = malloc(4 * sizeof(int));
    for (int k = 0; k < 4; k++)
        rec.heap[k] = 11 * k;
    rec.name = strdup("node \"one\"\n");
    strcpy(rec.tag, "ab\tc");
    rec.small = 65000;
    rec.next = malloc(sizeof(struct record));
    memset(rec.next, 0, sizeof(struct record));
    rec.next->id = 77;
    rec.byte = 7;
    rec.sbyte = -3;
    rec.big = -1234567890123LL;
    rec.ubig = 18446744073709551615ULL;
    rec.ratio = 0.1f * (rank + 1);
    rec.weight = -3.14 * rank;
    recp = &rec;
    for (int k = 0; k < 24; k++)
        runs[k] = k < 12 ? 4 : k;
    unnamed_value = (enum color)2;
    total += file_static;
    visit(3, recp);
    for (;;)
        sleep(1);
    return 0;
}
