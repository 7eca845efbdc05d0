/* Runs a fuzz target's LLVMFuzzerTestOneInput over files and directories
 * (recursively), as a test without libFuzzer: the seeds and the inputs that
 * once crashed a target (tests/fuzz/regressions/) must keep passing. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *more = realloc(buf, cap *= 2);
            if (!more) free(buf);
            buf = more;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
    }
    /* an exact-size copy, so ASan sees reads past the input's end */
    uint8_t *input = malloc(n ? n : 1);
    if (!input) abort();
    memcpy(input, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(input, n);
    free(input);
    return 1;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Returns the number of inputs run, -1 on an error. */
static int replay(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char **more = realloc(names, (n + 1) * sizeof *names);
        if (!more || !(more[n] = malloc(strlen(path) + strlen(e->d_name) + 2))) abort();
        names = more;
        sprintf(names[n++], "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        const int r = total < 0 ? 0 : replay(names[i]);
        total = r < 0 ? -1 : total + r;
        free(names[i]);
    }
    free(names);
    return total;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) {
        const int r = replay(argv[i]);
        if (r < 0) return 1;
        total += r;
    }
    printf("%s: %d inputs replayed\n", argv[0], total);
    return total > 0 ? 0 : 1;
}
