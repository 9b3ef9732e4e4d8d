/* LD_PRELOAD shim for the real llama.cpp tier: holds llama-server (and no other program of its command line: setsid,
 * env, sh) at the two points a slow start passes through, each until the test removes a file, so a start held
 * "before it listens" and "while it loads" is an event the test waits for, never a race with a tiny model's load.
 *   HELD_START=F  before main() (exec'd, its environment the server's, nothing listening): waits while F exists
 *   HELD_LOAD=F   at the fopen() of HELD_MODEL (tools/server/server.cpp starts its HTTP thread before load_model(),
 *                 so /health answers 503 "Loading model" meanwhile): waits while F exists
 * Each hold first creates F.reached, the test's event. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_server(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    return base && strcmp(base + 1, "llama-server") == 0;
}

static void hold(const char *var) {
    const char *file = getenv(var);
    if (!file || !is_server()) return;
    char reached[4096];
    snprintf(reached, sizeof reached, "%s.reached", file);
    int fd = open(reached, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    while (access(file, F_OK) == 0) usleep(5000);
}

__attribute__((constructor)) static void before_main(void) { hold("HELD_START"); }

static FILE *held_fopen(const char *symbol, const char *path, const char *mode) {
    FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, symbol);
    const char *model = getenv("HELD_MODEL");
    if (model && path && strcmp(path, model) == 0) {
        hold("HELD_LOAD");
        unsetenv("HELD_LOAD"); /* once: the loader opens the file again */
    }
    return real(path, mode);
}

FILE *fopen(const char *path, const char *mode) { return held_fopen("fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { return held_fopen("fopen64", path, mode); }
