#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"

int tk_source_open(const char *path, tk_source *src, tk_err *err) {
    memset(src, 0, sizeof *src);
    struct stat st;
    if (stat(path, &st) != 0) return tk_err_set(err, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) return tk_hf_source_open(path, src, err);
    FILE *f = fopen(path, "rb");
    if (!f) return tk_err_set(err, "%s: cannot open", path);
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    if (n == 4 && !memcmp(magic, "GGUF", 4)) return tk_gguf_source_open(path, src, err);
    size_t len = strlen(path);
    if (len >= 5 && !strcmp(path + len - 5, ".gguf"))
        return tk_err_set(err, "%s: bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file", path,
                          (unsigned char)magic[0], (unsigned char)magic[1], (unsigned char)magic[2],
                          (unsigned char)magic[3]);
    return tk_llama2c_source_open(path, src, err);
}

void tk_source_close(tk_source *src) {
    /* The format's impl owns everything the source points to. */
    if (src->impl_free && src->impl) src->impl_free(src->impl);
    free(src->by_name);
    memset(src, 0, sizeof *src);
}

static int by_name_then_position(const void *a, const void *b) {
    const tk_tensor *x = *(const tk_tensor *const *)a, *y = *(const tk_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

int tk_source_index_tensors(tk_source *src, tk_err *err) {
    /* one spare entry: a source without tensors must not read as out of memory (malloc(0) may be NULL) */
    src->by_name = malloc(((size_t)src->n_tensors + 1) * sizeof *src->by_name);
    if (!src->by_name) return tk_err_set(err, "out of memory indexing %d tensors", src->n_tensors);
    for (int i = 0; i < src->n_tensors; i++) src->by_name[i] = &src->tensors[i];
    qsort(src->by_name, (size_t)src->n_tensors, sizeof *src->by_name, by_name_then_position);
    return 0;
}

const tk_tensor *tk_source_find(const tk_source *src, const char *name) {
    /* the first entry not below name */
    size_t lo = 0, hi = (size_t)src->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(src->by_name[mid]->name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < (size_t)src->n_tensors && !strcmp(src->by_name[lo]->name, name) ? src->by_name[lo] : NULL;
}
