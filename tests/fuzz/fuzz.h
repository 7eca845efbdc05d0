/* Shared helpers of the fuzz targets (tests/fuzz/fuzz_*.c).  Each target
 * defines LLVMFuzzerTestOneInput; it is linked either with libFuzzer (the
 * TK_FUZZ build, tools/fuzz.sh) or with replay.c, which runs it over the
 * checked-in seeds and regression inputs as a ctest.
 *
 * The parsers read files, so an input becomes one or more files in a
 * per-process temporary directory (removed at exit).  Inputs holding
 * several files separate them with TK_FUZZ_SEP. */
#ifndef TK_FUZZ_H
#define TK_FUZZ_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tokamak.h>

#define TK_FUZZ_SEP "\n--8<--\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char tk_fuzz_dir_path[200];
static char tk_fuzz_names[8][64];
static int tk_fuzz_n_names;

static inline void tk_fuzz_cleanup(void) {
    char path[512];
    for (int i = 0; i < tk_fuzz_n_names; i++) {
        snprintf(path, sizeof path, "%.199s/%.63s", tk_fuzz_dir_path, tk_fuzz_names[i]);
        unlink(path);
    }
    rmdir(tk_fuzz_dir_path);
}

/* The temporary directory, created on first use: in $TMPDIR, else in
 * /dev/shm where there is one (memory: the targets write every input to
 * files), else in /tmp. */
static inline const char *tk_fuzz_dir(void) {
    if (!tk_fuzz_dir_path[0]) {
        const char *tmp = getenv("TMPDIR");
        struct stat st;
        if (!tmp || !*tmp) tmp = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(tk_fuzz_dir_path, sizeof tk_fuzz_dir_path, "%.150s/tk_fuzz_XXXXXX", tmp);
        if (!mkdtemp(tk_fuzz_dir_path)) {
            fprintf(stderr, "fuzz: mkdtemp %s: %s\n", tk_fuzz_dir_path, strerror(errno));
            abort();
        }
        atexit(tk_fuzz_cleanup);
    }
    return tk_fuzz_dir_path;
}

/* Writes (or, with data NULL, removes) file `name` of the temporary
 * directory; returns its path (a static buffer per name slot). */
static inline const char *tk_fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static char paths[8][512];
    int slot = 0;
    while (slot < tk_fuzz_n_names && strcmp(tk_fuzz_names[slot], name)) slot++;
    if (slot == tk_fuzz_n_names) {
        if (slot == 8) abort();
        snprintf(tk_fuzz_names[slot], sizeof tk_fuzz_names[slot], "%s", name);
        tk_fuzz_n_names++;
    }
    snprintf(paths[slot], sizeof paths[slot], "%.199s/%.63s", tk_fuzz_dir(), name);
    if (!data) {
        unlink(paths[slot]);
        return paths[slot];
    }
    /* a new file each time: rewriting one in place makes ext4 write the
     * truncated file's data back to disk on close (most of the hf target's
     * time was in that writeback) */
    unlink(paths[slot]);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", paths[slot], strerror(errno));
        abort();
    }
    return paths[slot];
}

/* Splits the input at TK_FUZZ_SEP into up to n parts; part[i] is NULL (and
 * len[i] 0) for parts the input does not have.  The last part takes the
 * rest, separators included. */
static inline void tk_fuzz_split(const uint8_t *data, size_t size, int n, const uint8_t **part, size_t *len) {
    const size_t sep_len = sizeof TK_FUZZ_SEP - 1;
    for (int i = 0; i < n; i++) {
        part[i] = NULL;
        len[i] = 0;
    }
    for (int i = 0; i < n; i++) {
        part[i] = data;
        const uint8_t *end = i == n - 1 ? NULL : memmem(data, size, TK_FUZZ_SEP, sep_len);
        if (!end) {
            len[i] = size;
            return;
        }
        len[i] = (size_t)(end - data);
        size -= len[i] + sep_len;
        data = end + sep_len;
    }
}

/* Writes the parts as the named files of the directory (a missing part:
 * no such file) and returns the directory. */
static inline const char *tk_fuzz_dir_files(const uint8_t *data, size_t size, int n, const char *const *names) {
    const uint8_t *part[8];
    size_t len[8];
    if (n > 8) abort();
    tk_fuzz_split(data, size, n, part, len);
    for (int i = 0; i < n; i++) tk_fuzz_file(names[i], part[i], len[i]);
    return tk_fuzz_dir();
}

/* Encodes a fixed text (with and without special-token parsing) and
 * decodes the vocabulary's first and last 150 ids, streaming: what a
 * loaded tokenizer is used for. */
static inline void tk_fuzz_use_tokenizer(const tk_tokenizer *t) {
    static const char text[] = "Hello world! <s>[INST] caf\xc3\xa9 \xe2\x96\x81x  \n\t12345 <|eot_id|></s>";
    int32_t ids[256];
    int n = 0;
    tk_err err;
    const int nv = tk_tokenizer_n_vocab(t);
    for (int special = 0; special < 2; special++)
        if (tk_tokenize(t, text, sizeof text - 1, true, special, ids, 256, &n, &err) == 0)
            for (int i = 0; i < n && i < 256; i++)
                if (ids[i] < 0 || ids[i] >= nv) abort(); /* every id is in the vocabulary */
    tk_detok d;
    tk_detok_init(&d, t, -1);
    char out[512];
    for (int i = 0; i < nv && i < 300; i++) {
        const int id = i < 150 ? i : nv - 1 - (i - 150);
        if (id < 0) break;
        (void)tk_tokenizer_piece(t, id);
        (void)tk_tokenizer_is_eog(t, id);
        if (tk_detok_push(&d, id, out, sizeof out) < 0) tk_detok_init(&d, t, id);
        (void)tk_token_to_bytes(t, id > 0 ? id - 1 : -1, id, true, out, sizeof out);
    }
    (void)tk_detok_flush(&d, out, sizeof out);
}

#endif
