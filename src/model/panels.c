/* The model's matrices in the panel layout (kernels/panels.h). */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../kernels/panels.h"
#include "../kernels/qgemm.h"
#include "model.h"

/* The matrices the forward pass multiplies by, in out[] if not NULL; their
 * number.  Tensors are const in the layers, but each is storage of the
 * model (its source's or its views'), so it may be given panels here. */
static size_t matmul_weights(tk_model *m, tk_tensor **out) {
    size_t n = 0;
#define ADD(t)                                            \
    do {                                                  \
        if (t) {                                          \
            if (out) out[n] = (tk_tensor *)(uintptr_t)(t); \
            n++;                                          \
        }                                                 \
    } while (0)
    for (int l = 0; l < m->hp.n_layers; l++) {
        const tk_layer *L = &m->layers[l];
        ADD(L->wq);
        ADD(L->wk);
        ADD(L->wv);
        ADD(L->wo);
        ADD(L->w_gate);
        ADD(L->w_up);
        ADD(L->w_down);
        ADD(L->gate_shexp);
        ADD(L->up_shexp);
        ADD(L->down_shexp);
        for (int e = 0; L->experts && e < 3 * m->hp.n_expert; e++) ADD(&L->experts[e]);
    }
    ADD(m->w.output);
    ADD(m->tp_head);
#undef ADD
    return n;
}

/* Bytes of t's panel layout if its kernel reads one, else 0.  reads[type]:
 * whether the type's kernel reads the layout (looked up once per type:
 * tk_qkernel_get checks the CPU, and cpuid is slow in a VM). */
static size_t panel_size(const tk_tensor *t, const bool reads[TK_DTYPE_LIMIT]) {
    if ((unsigned)t->type >= TK_DTYPE_LIMIT || !reads[t->type] || !tk_panels_layout(t->type) || t->ne[2] != 1 ||
        t->ne[3] != 1 || t->ne[0] > TK_PANELS_MAX_N)
        return 0;
    const size_t rb = tk_dtype_row_bytes(t->type, t->ne[0]);
    if (!rb || t->ne[1] < 1 || (uint64_t)t->ne[1] > t->nbytes / rb) return 0;
    return tk_panels_bytes(t->ne[1], rb);
}

typedef struct pack_job {
    tk_tensor **w;
    size_t *off; /* panel_data offset of each, SIZE_MAX: none */
    unsigned char *data;
    const tk_mapfile *mapping; /* the source's file mapping, or NULL */
} pack_job;

/* The whole pages of [p, p + n) in the read-only file mapping leave this
 * process's memory (a later read faults them back in from the page cache):
 * the kernels read the copy, so the file's rows would otherwise double the
 * resident size. */
static void drop_mapped_pages(const tk_mapfile *map, const void *p, size_t n) {
    const uintptr_t lo = (uintptr_t)map->data, hi = lo + map->size, a = (uintptr_t)p;
    if (!map->data || a < lo || a > hi || n > hi - a) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t first = (a + page - 1) / page * page, end = (a + n) / page * page;
    if (end > first) madvise((void *)first, end - first, MADV_DONTNEED);
}

static void pack_task(void *ctx, int task, int thread) {
    (void)thread;
    const pack_job *j = ctx;
    tk_tensor *t = j->w[task];
    if (j->off[task] == SIZE_MAX) return;
    unsigned char *dst = j->data + j->off[task];
    const size_t rb = tk_dtype_row_bytes(t->type, t->ne[0]);
    /* a chunk of rows at a time (a multiple of the panel height, so each
     * chunk's panels start at its first row's byte), its file pages dropped
     * as soon as it is copied: the rows and their copy are resident together
     * for one chunk, not for a whole matrix */
    const int64_t chunk = 1024;
    for (int64_t r0 = 0; r0 < t->ne[1]; r0 += chunk) {
        const int64_t rows = t->ne[1] - r0 < chunk ? t->ne[1] - r0 : chunk;
        const unsigned char *src = (const unsigned char *)t->data + (size_t)r0 * rb;
        tk_panels_pack(t->type, src, rb, rows, dst + (size_t)r0 * rb);
        if (j->mapping) drop_mapped_pages(j->mapping, src, rb * (size_t)rows);
    }
    t->panels = dst;
}

int tk_model_make_panels(tk_model *m, tk_isa isa, tk_threadpool *pool, tk_err *err) {
    if (m->panel_data) return 0;
    const size_t n = matmul_weights(m, NULL);
    if (n > (size_t)INT32_MAX) return tk_err_set(err, "too many matrices for the panel layout");
    tk_tensor **w = malloc((n ? n : 1) * sizeof *w);
    size_t *off = malloc((n ? n : 1) * sizeof *off);
    if (!w || !off) {
        free(w);
        free(off);
        return tk_err_set(err, "out of memory");
    }
    matmul_weights(m, w);
    /* a matrix listed twice is packed once: its panels field marks it
     * (pointing at `off`) until the packing sets it */
    bool reads[TK_DTYPE_LIMIT];
    for (int t = 0; t < TK_DTYPE_LIMIT; t++) {
        const tk_qkernel *k = tk_dtype_get(t) ? tk_qkernel_get((tk_dtype)t, isa) : NULL;
        reads[t] = k && k->gemm_panels;
    }
    size_t total = 0;
    bool too_large = false;
    for (size_t i = 0; i < n; i++) {
        off[i] = SIZE_MAX;
        const size_t bytes = panel_size(w[i], reads);
        if (!bytes || w[i]->panels) continue;
        if (total > SIZE_MAX - bytes) too_large = true;
        w[i]->panels = off;
        off[i] = total;
        total += bytes;
    }
    for (size_t i = 0; i < n; i++)
        if (w[i]->panels == off) w[i]->panels = NULL;
    if (too_large) {
        free(w);
        free(off);
        return tk_err_set(err, "the panel layout of the weights is too large");
    }
    if (total) {
        /* 2 MiB pages where the kernel has them: decode streams the copy, and
         * with 4 KiB pages a TLB miss every 64 lines held it back */
        const size_t huge = (size_t)2 << 20;
        m->panel_data = aligned_alloc(huge, (total + huge - 1) / huge * huge);
#ifdef MADV_HUGEPAGE
        if (m->panel_data) madvise(m->panel_data, (total + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
        if (!m->panel_data) {
            free(w);
            free(off);
            return tk_err_set(err, "out of memory for the weights' panel layout (%zu MiB)", total >> 20);
        }
        m->panel_bytes = total;
        pack_job j = {w, off, m->panel_data, m->src.mapping};
        tk_threadpool_run(pool, (int)n, pack_task, &j);
    }
    free(w);
    free(off);
    return 0;
}
