/*
 * checksum_service.c: an example sdm service plugin (sdm_service.h) with a binary protocol
 * of its own, for a tool that checks that every rank runs the same code.
 *
 * Request: the first byte is the opcode.
 *   0x00  echo: the reply is the request, byte for byte.
 *   0x01  checksum: then a u64 address and a u32 length, little-endian. The reply is the
 *         8-byte little-endian FNV-1a 64 of that region of the monitored program's memory
 *         (/proc/PID/mem); address 0 means the start of the first mapping of the program's
 *         executable (/proc/PID/maps). Ranks running the same binary reply identical bytes,
 *         so the tree merges them into one group.
 *   'e'   text echo, typed on a command line: `echo WORDS`; the reply is WORDS
 *         (`sdm launch --service-plugin ... --service checksum --send 'echo hi'`).
 *
 * Build: cc -shared -fPIC -I server/include server/examples/c/checksum_service.c \
 *           -o libchecksum_service.so
 * Use:   sdm launch -n 8 --service-plugin ./libchecksum_service.so --service checksum ...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdm_service.h"

enum { OP_ECHO = 0x00, OP_CHECKSUM = 0x01, OP_TEXT_ECHO = 'e', CHECKSUM_LEN = 13 };

/* The text echo's request starts with this. */
static const char TEXT_ECHO[] = "echo ";

static void fail(const sdm_service_host *host, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail(const sdm_service_host *host, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) {
        n = 0;
    }
    host->error(host->ctx, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

static uint64_t read_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* The start of the first mapping of the program's executable, or 0. */
static uint64_t exe_start(uint32_t pid) {
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof path, "/proc/%u/exe", pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n <= 0) {
        return 0;
    }
    exe[n] = '\0';
    snprintf(path, sizeof path, "/proc/%u/maps", pid);
    FILE *maps = fopen(path, "r");
    if (!maps) {
        return 0;
    }
    char line[PATH_MAX + 128];
    uint64_t start = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long long lo = 0;
        int off = 0;
        /* start-end perms offset dev inode path */
        if (sscanf(line, "%llx-%*x %*s %*s %*s %*s %n", &lo, &off) < 1 || off == 0) {
            continue;
        }
        char *file = line + off;
        file[strcspn(file, "\n")] = '\0';
        if (strcmp(file, exe) == 0) {
            start = lo;
            break;
        }
    }
    fclose(maps);
    return start;
}

static int checksum(const sdm_service_host *host, const uint8_t *req, size_t len) {
    if (len != CHECKSUM_LEN) {
        fail(host, "checksum needs 13 bytes (opcode, u64 address, u32 length), got %zu", len);
        return 1;
    }
    if (host->pid == 0) {
        fail(host, "this server controls no program: start one first");
        return 1;
    }
    uint64_t addr = read_le(req + 1, 8);
    uint32_t size = (uint32_t)read_le(req + 9, 4);
    if (addr == 0) {
        addr = exe_start(host->pid);
        if (addr == 0) {
            fail(host, "process %u: its executable is not mapped", host->pid);
            return 1;
        }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/mem", host->pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fail(host, "process %u: %s: %s", host->pid, path, strerror(errno));
        return 1;
    }
    uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    uint8_t buf[65536];
    uint64_t done = 0;
    while (done < size) {
        size_t want = size - done < sizeof buf ? (size_t)(size - done) : sizeof buf;
        ssize_t got = pread(fd, buf, want, (off_t)(addr + done));
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            close(fd);
            fail(host, "process %u: reading %u bytes at 0x%llx: %s", host->pid, size,
                 (unsigned long long)(addr + done), strerror(e));
            return 1;
        }
        for (ssize_t i = 0; i < got; i++) {
            hash ^= buf[i];
            hash *= 0x100000001b3ull;
        }
        done += (uint64_t)got;
    }
    close(fd);
    uint8_t out[8];
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(hash >> (8 * i));
    }
    host->reply(host->ctx, out, sizeof out);
    return 0;
}

static int svc_init(const sdm_service_host *host, void **state) {
    (void)host;
    *state = NULL;
    return 0;
}

static int svc_handle(void *state, const sdm_service_host *host, const uint8_t *req,
                      size_t len) {
    (void)state;
    if (len == 0) {
        fail(host, "empty request: the first byte is the opcode (0 echo, 1 checksum, 'e' text echo)");
        return 1;
    }
    switch (req[0]) {
    case OP_ECHO:
        host->reply(host->ctx, req, len);
        return 0;
    case OP_CHECKSUM:
        return checksum(host, req, len);
    case OP_TEXT_ECHO:
        if (len < sizeof TEXT_ECHO - 1 || memcmp(req, TEXT_ECHO, sizeof TEXT_ECHO - 1) != 0) {
            fail(host, "a text request is `echo WORDS`");
            return 1;
        }
        host->reply(host->ctx, req + sizeof TEXT_ECHO - 1, len - (sizeof TEXT_ECHO - 1));
        return 0;
    default:
        fail(host, "unknown opcode 0x%02x (0 echo, 1 checksum, `echo WORDS`)", req[0]);
        return 1;
    }
}

static const sdm_service_vtable VTABLE = {
    .abi_version = SDM_SERVICE_ABI_VERSION,
    .reserved = 0,
    .name = "checksum",
    .init = svc_init,
    .handle = svc_handle,
    .destroy = NULL,
};

const sdm_service_vtable *sdm_service_entry(void) { return &VTABLE; }
