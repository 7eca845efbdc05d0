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
    memset(src, 0, sizeof *src);
}

const tk_tensor *tk_source_find(const tk_source *src, const char *name) {
    for (int i = 0; i < src->n_tensors; i++)
        if (!strcmp(src->tensors[i].name, name)) return &src->tensors[i];
    return NULL;
}
