/* A named view of weight data in some file or buffer. */
#ifndef TK_TENSOR_H
#define TK_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define TK_MAX_DIMS 4

typedef struct tk_tensor {
    char *name;               /* GGUF-style name, e.g. "blk.0.attn_q.weight" */
    tk_dtype type;
    int ndim;
    int64_t ne[TK_MAX_DIMS];  /* ne[0] = row length (innermost); unused dims = 1 */
    const void *data;
    size_t nbytes;
    /* the same rows in the panel layout (kernels/panels.h), made at load for
     * kernels that read it, or NULL; owned by whoever made it */
    const void *panels;
} tk_tensor;

static inline int64_t tk_tensor_nelems(const tk_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

#endif
