/* Hugging Face directory loader and safetensors reader.
 *
 * - code-target / code-draft: hyper-parameters from CODE_MODELS.md, GGUF
 *   names, shapes and BF16 types.
 * - Independent check: the llama2.c exports of the same models hold the
 *   same BF16-rounded weights as float32; every tensor must match bit for
 *   bit (Q/K after the halves -> adjacent-pair row permutation).
 * - A sharded copy of code-draft written here must load identically.
 * - Hostile safetensors files and model directories must fail cleanly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "formats/source.h"
#include "tk_test.h"
#include <tokamak.h> /* tk_mapfile, tk_read_file */

/* ---------- helpers ---------- */

static float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static const tk_tensor *find_t(const tk_source *src, const char *name) {
    for (int i = 0; i < src->n_tensors; i++)
        if (strcmp(src->tensors[i].name, name) == 0) return &src->tensors[i];
    return NULL;
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

static int write_str(const char *path, const char *s) { return write_file(path, s, strlen(s)); }

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* Minimal safetensors writer. */
typedef struct wt {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[5];
    const void *data;
    size_t nbytes;
} wt;

static int write_st(const char *path, const wt *ts, int n) {
    size_t cap = 4096 + (size_t)n * 512, len = 0;
    char *h = malloc(cap);
    if (!h) return -1;
    uint64_t off = 0;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name,
                                ts[i].dtype);
        for (int d = 0; d < ts[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + ts[i].nbytes));
        off += ts[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return -1;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)len >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
    for (int i = 0; ok && i < n; i++)
        if (ts[i].nbytes) ok = fwrite(ts[i].data, 1, ts[i].nbytes, f) == ts[i].nbytes;
    ok = (fclose(f) == 0) && ok;
    free(h);
    return ok ? 0 : -1;
}

/* Raw file: 8-byte length field, hl header bytes, then ndata bytes of data
 * (a byte pattern).  hlen == UINT64_MAX: the length field is the header
 * length after padding it with spaces to a multiple of 8 (as real writers
 * do, so data stays aligned); otherwise hlen is written as given. */
static int write_raw_n(const char *path, uint64_t hlen, const char *header, size_t hl, size_t ndata) {
    size_t pad = hlen == UINT64_MAX ? (8 - hl % 8) % 8 : 0;
    if (hlen == UINT64_MAX) hlen = hl + pad;
    size_t total = 8 + hl + pad + ndata;
    unsigned char *b = calloc(1, total);
    if (!b) return -1;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', pad);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + pad + i] = (unsigned char)i;
    int rc = write_file(path, b, total);
    free(b);
    return rc;
}

static int write_raw(const char *path, uint64_t hlen, const char *header, size_t ndata) {
    return write_raw_n(path, hlen, header, strlen(header), ndata);
}

/* ---------- 1. the real models ---------- */

typedef struct expect {
    const char *name;
    int dim, layers, heads, kv, hd, ffn, vocab;
} expect;

static void check_model(const expect *e) {
    char rel[64];
    snprintf(rel, sizeof rel, "models/%s", e->name);
    const char *dir = tk_shared(rel);
    tk_source src;
    tk_err err = {{0}};
    int rc = tk_hf_source_open(dir, &src, &err);
    CHECK(rc == 0, "%s: %s", e->name, err.msg);
    if (rc != 0) return;
    const tk_hparams *hp = &src.hp;
    CHECK(src.format == TK_FORMAT_HF, "format");
    CHECK(strcmp(src.arch, "llama") == 0, "arch %s", src.arch);
    CHECK(strcmp(src.name, e->name) == 0, "name %s", src.name);
    CHECK(src.path && strcmp(src.path, dir) == 0, "path");
    CHECK(src.hf_tok_config && !src.hf_tok_config_error, "tokenizer_config.json read");
    CHECK(src.chat_template && strstr(src.chat_template, "[INST]"), "chat template");
    CHECK(hp->dim == e->dim, "dim %d", hp->dim);
    CHECK(hp->n_layers == e->layers, "layers %d", hp->n_layers);
    CHECK(hp->n_heads == e->heads, "heads %d", hp->n_heads);
    CHECK(hp->n_kv_heads == e->kv, "kv %d", hp->n_kv_heads);
    CHECK(hp->head_dim == e->hd, "head_dim %d", hp->head_dim);
    CHECK(hp->ffn_dim == e->ffn, "ffn %d", hp->ffn_dim);
    CHECK(hp->n_vocab == e->vocab, "vocab %d", hp->n_vocab);
    CHECK(hp->ctx_len == 512, "ctx %d", hp->ctx_len);
    CHECK(hp->norm_eps == 1e-5f, "eps %g", hp->norm_eps);
    CHECK(hp->rope_theta == 10000.0f, "theta %g", hp->rope_theta);
    CHECK(hp->rope_style == TK_ROPE_HALVES, "rope style");
    CHECK(hp->rope_scaling == TK_ROPE_SCALING_NONE, "rope scaling");
    CHECK(hp->tied_output, "tied");
    CHECK(src.gen.n_eos_ids == 1 && src.gen.eos_ids[0] == 2, "eos %d", src.gen.n_eos_ids);
    CHECK(src.gen.temperature < 0 && src.gen.top_p < 0 && src.gen.top_k < 0, "gen defaults");
    CHECK(src.n_tensors == 2 + 9 * e->layers, "n_tensors %d", src.n_tensors);
    CHECK(find_t(&src, "output.weight") == NULL, "no output.weight when tied");

    int64_t q = (int64_t)e->heads * e->hd, kv = (int64_t)e->kv * e->hd;
    struct { const char *n; int64_t ne0, ne1; int nd; } want[] = {
        {"attn_norm.weight", e->dim, 1, 1}, {"ffn_norm.weight", e->dim, 1, 1},
        {"attn_q.weight", e->dim, q, 2},    {"attn_k.weight", e->dim, kv, 2},
        {"attn_v.weight", e->dim, kv, 2},   {"attn_output.weight", q, e->dim, 2},
        {"ffn_gate.weight", e->dim, e->ffn, 2}, {"ffn_up.weight", e->dim, e->ffn, 2},
        {"ffn_down.weight", e->ffn, e->dim, 2},
    };
    int bad = 0;
    for (int l = -1; l < e->layers; l++) {
        for (size_t k = 0; k < (l < 0 ? 2 : sizeof want / sizeof want[0]); k++) {
            char nm[64];
            int64_t ne0, ne1;
            int nd;
            if (l < 0) {
                snprintf(nm, sizeof nm, "%s", k == 0 ? "token_embd.weight" : "output_norm.weight");
                ne0 = e->dim;
                ne1 = k == 0 ? e->vocab : 1;
                nd = k == 0 ? 2 : 1;
            } else {
                snprintf(nm, sizeof nm, "blk.%d.%s", l, want[k].n);
                ne0 = want[k].ne0;
                ne1 = want[k].ne1;
                nd = want[k].nd;
            }
            const tk_tensor *t = find_t(&src, nm);
            if (!t) {
                CHECK(t != NULL, "%s missing %s", e->name, nm);
                bad++;
                continue;
            }
            bool ok = t->type == TK_BF16 && t->ndim == nd && t->ne[0] == ne0 && t->ne[1] == ne1 &&
                      t->ne[2] == 1 && t->ne[3] == 1 && t->nbytes == (size_t)(ne0 * ne1 * 2) &&
                      t->data != NULL;
            if (!ok) {
                CHECK(ok, "%s %s: type %d ndim %d ne %lld x %lld", e->name, nm, t->type, t->ndim,
                      (long long)t->ne[0], (long long)t->ne[1]);
                bad++;
            }
        }
    }
    CHECK(bad == 0, "%s: %d tensor problems", e->name, bad);
    tk_source_close(&src);
}

/* ---------- 2. llama2.c export: independent check ---------- */

/* Number of elements of t whose BF16->f32 value differs bitwise from ref. */
static long cmp_plain(const tk_tensor *t, const float *ref) {
    const uint16_t *d = t->data;
    long bad = 0;
    int64_t n = tk_tensor_nelems(t);
    for (int64_t i = 0; i < n; i++) {
        float a = bf16_f32(d[i]);
        if (memcmp(&a, &ref[i], 4) != 0) bad++;
    }
    return bad;
}

/* Q/K rows: HF (halves) row (h, j) vs llama2.c (adjacent pairs) row.
 * dir 0: HF (h, i) <-> l2c (h, 2i), HF (h, hd/2+i) <-> l2c (h, 2i+1)
 * dir 1: the inverse mapping (HF (h, 2i) <-> l2c (h, i), ...). */
static long cmp_perm(const tk_tensor *t, const float *ref, int hd, int dir) {
    const uint16_t *d = t->data;
    int64_t cols = t->ne[0], rows = t->ne[1];
    long bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / hd, j = r % hd, half = hd / 2, lr;
        if (dir == 0)
            lr = j < half ? 2 * j : 2 * (j - half) + 1;
        else
            lr = (j % 2 == 0) ? j / 2 : half + j / 2;
        const float *rr = ref + (h * hd + lr) * cols;
        for (int64_t c = 0; c < cols; c++) {
            float a = bf16_f32(d[r * cols + c]);
            if (memcmp(&a, &rr[c], 4) != 0) bad++;
        }
    }
    return bad;
}

static void check_llama2c(const char *model) {
    char rel[96];
    snprintf(rel, sizeof rel, "models/%s", model);
    tk_source src;
    tk_err err = {{0}};
    if (tk_hf_source_open(tk_shared(rel), &src, &err) != 0) {
        CHECK(0, "%s: %s", model, err.msg);
        return;
    }
    snprintf(rel, sizeof rel, "models/%s.llama2c.bin", model);
    tk_mapfile m;
    if (tk_mapfile_open(&m, tk_shared(rel), &err) != 0) {
        CHECK(0, "%s", err.msg);
        tk_source_close(&src);
        return;
    }
    const tk_hparams *hp = &src.hp;
    int32_t h[7];
    CHECK(m.size >= 28, "llama2c too small");
    if (m.size < 28) goto out;
    memcpy(h, m.data, 28);
    CHECK(h[0] == hp->dim && h[1] == hp->ffn_dim && h[2] == hp->n_layers && h[3] == hp->n_heads &&
              h[4] == hp->n_kv_heads && h[5] == hp->n_vocab && h[6] == hp->ctx_len,
          "llama2c header %d %d %d %d %d %d %d", h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    int64_t L = hp->n_layers, D = hp->dim, F = hp->ffn_dim, V = hp->n_vocab, hd = hp->head_dim;
    int64_t qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd, hs = D / hp->n_heads;
    int64_t nfl = V * D + L * D + L * qd * D + 2 * L * kvd * D + L * D * qd + L * D + 3 * L * F * D + D +
                  (int64_t)hp->ctx_len * hs;
    CHECK((int64_t)m.size == 28 + 4 * nfl, "llama2c size %zu vs %lld", m.size, (long long)(28 + 4 * nfl));
    if ((int64_t)m.size != 28 + 4 * nfl) goto out;
    {
        float *all = malloc((size_t)nfl * 4);
        if (!all) goto out;
        memcpy(all, m.data + 28, (size_t)nfl * 4);
        const float *p = all;
        const float *emb = p; p += V * D;
        const float *rms_att = p; p += L * D;
        const float *wq = p; p += L * qd * D;
        const float *wk = p; p += L * kvd * D;
        const float *wv = p; p += L * kvd * D;
        const float *wo = p; p += L * D * qd;
        const float *rms_ffn = p; p += L * D;
        const float *w1 = p; p += L * F * D;
        const float *w2 = p; p += L * D * F;
        const float *w3 = p; p += L * F * D;
        const float *rms_fin = p;

        long bad = cmp_plain(find_t(&src, "token_embd.weight"), emb);
        bad += cmp_plain(find_t(&src, "output_norm.weight"), rms_fin);
        long qk_dir[2] = {0, 0};
        for (int64_t l = 0; l < L; l++) {
            char nm[64];
#define T(s) (snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)l, s), find_t(&src, nm))
            bad += cmp_plain(T("attn_norm.weight"), rms_att + l * D);
            bad += cmp_plain(T("ffn_norm.weight"), rms_ffn + l * D);
            bad += cmp_plain(T("attn_v.weight"), wv + l * kvd * D);
            bad += cmp_plain(T("attn_output.weight"), wo + l * D * qd);
            bad += cmp_plain(T("ffn_gate.weight"), w1 + l * F * D);
            bad += cmp_plain(T("ffn_down.weight"), w2 + l * D * F);
            bad += cmp_plain(T("ffn_up.weight"), w3 + l * F * D);
            for (int dir = 0; dir < 2; dir++) {
                qk_dir[dir] += cmp_perm(T("attn_q.weight"), wq + l * qd * D, (int)hd, dir);
                qk_dir[dir] += cmp_perm(T("attn_k.weight"), wk + l * kvd * D, (int)hd, dir);
            }
#undef T
        }
        CHECK(bad == 0, "%s: %ld elements differ from llama2.c export", model, bad);
        CHECK(qk_dir[0] == 0, "%s: Q/K permutation HF(h,i)->l2c(h,2i), HF(h,hd/2+i)->l2c(h,2i+1): %ld differ",
              model, qk_dir[0]);
        CHECK(qk_dir[1] > 0, "%s: inverse permutation should not match", model);
        printf("%s: llama2.c export: plain mismatches %ld; Q/K halves->pairs (HF(h,i)->l2c(h,2i)) "
               "mismatches %ld, inverse %ld\n",
               model, bad, qk_dir[0], qk_dir[1]);
        free(all);
    }
out:
    tk_mapfile_close(&m);
    tk_source_close(&src);
}

/* ---------- 3. sharded copy of code-draft ---------- */

static void check_sharded(const char *root) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/sharded-draft", root);
    CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    tk_err err = {{0}};
    tk_safetensors *st;
    int rc = tk_safetensors_open(tk_shared("models/code-draft/model.safetensors"), &st, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc != 0) return;
    int n = tk_safetensors_count(st);
    CHECK(n == 20, "code-draft tensors %d", n);
    wt *ts = calloc((size_t)n, sizeof *ts);
    size_t icap = 8192, ilen = 0;
    char *index = malloc(icap);
    if (!ts || !index) {
        free(ts);
        free(index);
        tk_safetensors_close(st);
        return;
    }
    ilen += (size_t)snprintf(index, icap, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
    int half = n / 2;
    for (int i = 0; i < n; i++) {
        const tk_st_tensor *t = tk_safetensors_get(st, i);
        ts[i].name = t->name;
        ts[i].dtype = t->dtype == TK_BF16 ? "BF16" : t->dtype == TK_F16 ? "F16" : "F32";
        ts[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) ts[i].shape[d] = t->shape[d];
        ts[i].data = t->data;
        ts[i].nbytes = t->nbytes;
        ilen += (size_t)snprintf(index + ilen, icap - ilen, "%s\"%s\":\"model-%05d-of-00002.safetensors\"",
                                 i ? "," : "", t->name, i < half ? 1 : 2);
    }
    snprintf(index + ilen, icap - ilen, "}}");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(write_st(path, ts, half) == 0, "write shard 1");
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(write_st(path, ts + half, n - half) == 0, "write shard 2");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(write_str(path, index) == 0, "write index");
    char *cfg;
    size_t cfglen;
    if (tk_read_file(tk_shared("models/code-draft/config.json"), &cfg, &cfglen, &err) == 0) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        CHECK(write_file(path, cfg, cfglen) == 0, "write config");
        free(cfg);
    }
    free(index);
    free(ts);

    tk_source a, b;
    int ra = tk_hf_source_open(tk_shared("models/code-draft"), &a, &err);
    CHECK(ra == 0, "%s", err.msg);
    int rb = tk_hf_source_open(dir, &b, &err);
    CHECK(rb == 0, "sharded: %s", err.msg);
    if (ra == 0 && rb == 0) {
        CHECK(a.n_tensors == b.n_tensors, "sharded tensor count %d vs %d", b.n_tensors, a.n_tensors);
        CHECK(strcmp(b.name, "sharded-draft") == 0, "sharded name %s", b.name);
        CHECK(memcmp(&a.hp, &b.hp, sizeof a.hp) == 0, "sharded hparams differ");
        CHECK(b.gen.n_eos_ids == 0 && b.gen.temperature < 0, "no generation_config: defaults");
        int same = 0;
        for (int i = 0; i < a.n_tensors; i++) {
            const tk_tensor *x = &a.tensors[i], *y = find_t(&b, x->name);
            if (y && x->type == y->type && x->ndim == y->ndim &&
                memcmp(x->ne, y->ne, sizeof x->ne) == 0 && x->nbytes == y->nbytes &&
                memcmp(x->data, y->data, x->nbytes) == 0 && x->data != y->data)
                same++;
            else
                CHECK(0, "sharded tensor %s differs", x->name);
        }
        CHECK(same == a.n_tensors, "sharded: %d/%d identical", same, a.n_tensors);
    }
    if (ra == 0) tk_source_close(&a);
    if (rb == 0) tk_source_close(&b);
    tk_safetensors_close(st);
}

/* ---------- 4. hostile safetensors ---------- */

static void st_fail_n(const char *root, const char *label, uint64_t hlen, const char *header, size_t hl,
                      size_t ndata, const char *want) {
    char path[600];
    snprintf(path, sizeof path, "%s/bad-%s.safetensors", root, label);
    if (write_raw_n(path, hlen, header, hl, ndata) != 0) {
        CHECK(0, "write %s", path);
        return;
    }
    tk_safetensors *st = (tk_safetensors *)1;
    tk_err err = {{0}};
    int rc = tk_safetensors_open(path, &st, &err);
    CHECK(rc != 0 && st == NULL, "%s: should fail", label);
    if (rc == 0) tk_safetensors_close(st);
    CHECK(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", label, err.msg, want);
    CHECK(strstr(err.msg, path) != NULL, "%s: message '%s' lacks the path", label, err.msg);
    remove(path);
}

static void st_fail(const char *root, const char *label, uint64_t hlen, const char *header,
                    size_t ndata, const char *want) {
    st_fail_n(root, label, hlen, header, strlen(header), ndata, want);
}

static void check_hostile_st(const char *root) {
    const char *E = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    char path[600];
    /* A valid file first (with metadata, a scalar and an empty tensor). */
    snprintf(path, sizeof path, "%s/ok.safetensors", root);
    CHECK(write_raw(path, UINT64_MAX,
                    "{\"__metadata__\":{\"x\":\"y\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                    "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[28,30]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[28,28]}}   ",
                    30) == 0,
          "write ok");
    tk_safetensors *st;
    tk_err err = {{0}};
    int rc = tk_safetensors_open(path, &st, &err);
    CHECK(rc == 0, "ok file: %s", err.msg);
    if (rc == 0) {
        CHECK(tk_safetensors_count(st) == 4, "count %d", tk_safetensors_count(st));
        const tk_st_tensor *b = tk_safetensors_find(st, "b"), *s = tk_safetensors_find(st, "s");
        CHECK(b && b->dtype == TK_BF16 && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 3 &&
                  b->nbytes == 12,
              "tensor b");
        CHECK(s && s->ndim == 0 && s->nbytes == 2, "scalar");
        CHECK(tk_safetensors_find(st, "__metadata__") == NULL, "metadata is not a tensor");
        CHECK(tk_safetensors_find(st, "nope") == NULL, "find absent");
        tk_safetensors_close(st);
    }
    remove(path);

    /* empty file / too small */
    snprintf(path, sizeof path, "%s/empty.safetensors", root);
    write_file(path, "", 0);
    rc = tk_safetensors_open(path, &st, &err);
    CHECK(rc != 0 && strstr(err.msg, "empty"), "empty file: %s", err.msg);
    write_file(path, "\x02\0\0", 3);
    rc = tk_safetensors_open(path, &st, &err);
    CHECK(rc != 0 && strstr(err.msg, "too small"), "tiny file: %s", err.msg);
    remove(path);
    rc = tk_safetensors_open(path, &st, &err);
    CHECK(rc != 0 && strstr(err.msg, "cannot open"), "missing file: %s", err.msg);

    st_fail(root, "pasteof", 1000, E, 16, "past end of file");
    st_fail(root, "absurd", (uint64_t)1 << 40, E, 16, "absurd header length");
    st_fail(root, "hugelen", UINT64_MAX - 3, E, 16, "absurd header length");
    st_fail(root, "zerolen", 0, "", 16, "too small");
    st_fail(root, "badjson", UINT64_MAX, "{\"a\": {\"dtype\": ", 16, "invalid JSON");
    st_fail_n(root, "nulbyte", 8, "{\"a\":\0 }", 8, 0, "invalid JSON");
    st_fail(root, "badutf8", UINT64_MAX, "{\"\xff\xfe\":1}", 0, "invalid JSON");
    st_fail(root, "dupkey", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "invalid JSON");
    st_fail(root, "array", UINT64_MAX, "[1,2,3]", 0, "not an object");
    st_fail(root, "entry", UINT64_MAX, "{\"a\":7}", 0, "not an object");
    st_fail(root, "range", UINT64_MAX, E, 8, "out of range");
    st_fail(root, "range2", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,18446744073709551616]}}",
            8, "invalid JSON"); /* beyond int64: jansson refuses it */
    st_fail(root, "range3", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775803,9223372036854775807]}}",
            8, "out of range");
    st_fail(root, "negoff", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
            "negative data_offsets");
    st_fail(root, "inconsistent", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}",
            16, "needs 16");
    st_fail(root, "dtypesize", UINT64_MAX, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}",
            16, "needs 8");
    st_fail(root, "reversed", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
            16, "begin 8 > end 4");
    st_fail(root, "overlap", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
            24, "overlapping");
    st_fail(root, "alias", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
            16, "overlapping");
    st_fail(root, "dtype", UINT64_MAX, "{\"a\":{\"dtype\":\"Q7\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
            "unknown dtype 'Q7'");
    st_fail(root, "i64", UINT64_MAX, "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
            "unsupported dtype 'I64'");
    st_fail(root, "dtypetype", UINT64_MAX, "{\"a\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
            "'dtype' is not a string");
    st_fail(root, "nodtype", UINT64_MAX, "{\"a\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
            "missing 'dtype'");
    st_fail(root, "dims5", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,4],\"data_offsets\":[0,16]}}", 16, "5 dims");
    st_fail(root, "negdim", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,-4],\"data_offsets\":[0,16]}}",
            16, "negative dimension");
    st_fail(root, "floatdim", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4.0],\"data_offsets\":[0,16]}}",
            16, "not an integer");
    st_fail(root, "overflow", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}", 16,
            "overflow");
    st_fail(root, "overflow2", UINT64_MAX,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 16,
            "overflow");
    st_fail(root, "shapetype", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16,
            "'shape' is not an array");
    st_fail(root, "offs3", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16,32]}}", 32,
            "array of 2 integers");
    st_fail(root, "offsstr", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[\"0\",16]}}",
            16, "array of 2 integers");
    st_fail(root, "nooffs", UINT64_MAX, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16,
            "missing 'data_offsets'");
    /* Header of odd length: the F32 data start is not 4-byte aligned. */
    {
        const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} ";
        CHECK(strlen(h) % 4 != 0, "misaligned header length");
        st_fail(root, "misaligned", strlen(h), h, 4, "aligned");
    }
}

/* ---------- 5. hostile / variant model directories ---------- */

typedef struct tiny {
    int q_rows;       /* rows of q_proj (default 8) */
    int layer;        /* layer index used in names (default 0) */
    bool lm_head;
    bool no_weights;
} tiny;

#define CFG_REST                                                                               \
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"             \
    "\"intermediate_size\":16,\"vocab_size\":10,\"max_position_embeddings\":64"
#define CFG_OK "{\"model_type\":\"llama\",\"hidden_size\":8," CFG_REST

static int write_tiny(const char *dir, const tiny *o) {
    static float buf[256];
    for (int i = 0; i < 256; i++) buf[i] = (float)i * 0.25f;
    int q = o->q_rows ? o->q_rows : 8;
    char names[9][64];
    const char *suf[9] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                          "mlp.down_proj"};
    int64_t shp[9][2] = {{8, 0}, {q, 8}, {4, 8}, {4, 8}, {8, 8}, {8, 0}, {16, 8}, {16, 8}, {8, 16}};
    wt ts[13];
    int n = 0;
    ts[n++] = (wt){"model.embed_tokens.weight", "F32", 2, {10, 8}, buf, 320};
    for (int i = 0; i < 9; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.%s.weight", o->layer, suf[i]);
        int nd = shp[i][1] ? 2 : 1;
        int64_t ne = shp[i][0] * (nd == 2 ? shp[i][1] : 1);
        ts[n++] = (wt){names[i], "F32", nd, {shp[i][0], shp[i][1]}, buf, (size_t)ne * 4};
    }
    ts[n++] = (wt){"model.norm.weight", "F32", 1, {8}, buf, 32};
    ts[n++] = (wt){"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", 1, {2}, buf, 8};
    if (o->lm_head) ts[n++] = (wt){"lm_head.weight", "F32", 2, {10, 8}, buf + 80, 320};
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return write_st(path, ts, n);
}

/* Creates root/<label>/ with the given files and opens it. */
static int hf_case(const char *root, const char *label, const char *config, const tiny *o,
                   const char *index, const char *gen, tk_source *src, tk_err *err) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", root, label);
    if (mkdir(dir, 0700) != 0) return tk_err_set(err, "test: mkdir %s failed", dir);
    if (config) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        write_str(path, config);
    }
    tiny def = {0};
    if (!o) o = &def;
    if (!o->no_weights) write_tiny(dir, o);
    if (index) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        write_str(path, index);
    }
    if (gen) {
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        write_str(path, gen);
    }
    return tk_hf_source_open(dir, src, err);
}

static void hf_fail(const char *root, const char *label, const char *config, const tiny *o,
                    const char *index, const char *gen, const char *want, const char *file) {
    tk_source src;
    tk_err err = {{0}};
    int rc = hf_case(root, label, config, o, index, gen, &src, &err);
    CHECK(rc != 0, "%s: should fail", label);
    if (rc == 0) {
        tk_source_close(&src);
        return;
    }
    CHECK(src.impl == NULL && src.tensors == NULL && src.path == NULL, "%s: src cleared", label);
    CHECK(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", label, err.msg, want);
    if (file) CHECK(strstr(err.msg, file) != NULL, "%s: message '%s' lacks '%s'", label, err.msg, file);
}

static void check_dirs(const char *root) {
    tk_source src;
    tk_err err = {{0}};
    int rc;

    /* Baseline tiny model: loads; F32 tensors; inv_freq ignored; tied. */
    rc = hf_case(root, "ok", CFG_OK "}", NULL, NULL, NULL, &src, &err);
    CHECK(rc == 0, "tiny ok: %s", err.msg);
    if (rc == 0) {
        CHECK(src.n_tensors == 11, "tiny tensors %d", src.n_tensors);
        CHECK(src.hp.tied_output, "tiny tied");
        CHECK(src.hp.head_dim == 4 && src.hp.n_kv_heads == 1 && src.hp.rope_theta == 10000.0f &&
                  src.hp.norm_eps == 1e-6f && src.hp.ctx_len == 64,
              "tiny hp defaults");
        CHECK(strcmp(src.name, "ok") == 0, "name %s", src.name);
        const tk_tensor *t = find_t(&src, "blk.0.ffn_down.weight");
        CHECK(t && t->type == TK_F32 && t->ne[0] == 16 && t->ne[1] == 8 && t->ndim == 2, "ffn_down ne");
        const tk_tensor *e = find_t(&src, "token_embd.weight");
        CHECK(e && ((const float *)e->data)[9] == 2.25f, "embd data");
        tk_source_close(&src);
    }
    /* lm_head present and not tied -> output.weight. */
    tiny lm = {.lm_head = true};
    rc = hf_case(root, "lmhead", CFG_OK ",\"tie_word_embeddings\":false}", &lm, NULL, NULL, &src, &err);
    CHECK(rc == 0, "lm_head: %s", err.msg);
    if (rc == 0) {
        const tk_tensor *t = find_t(&src, "output.weight");
        CHECK(!src.hp.tied_output && t && t->ne[0] == 8 && t->ne[1] == 10 &&
                  ((const float *)t->data)[0] == 20.0f,
              "output.weight");
        tk_source_close(&src);
    }
    /* lm_head present but tie_word_embeddings true -> tied, no output.weight. */
    rc = hf_case(root, "lmtied", CFG_OK ",\"tie_word_embeddings\":true}", &lm, NULL, NULL, &src, &err);
    CHECK(rc == 0, "lm tied: %s", err.msg);
    if (rc == 0) {
        CHECK(src.hp.tied_output && !find_t(&src, "output.weight"), "tied ignores lm_head");
        tk_source_close(&src);
    }
    /* mistral, architectures only, rope scaling variants, generation config. */
    rc = hf_case(root, "mistral",
                 "{\"model_type\":\"mistral\",\"hidden_size\":8,\"rope_theta\":1000000.0,"
                 "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}," CFG_REST "}",
                 NULL, NULL,
                 "{\"eos_token_id\":[2,7],\"temperature\":0.6,\"top_p\":0.9,\"top_k\":40,\"do_sample\":true}",
                 &src, &err);
    CHECK(rc == 0, "mistral: %s", err.msg);
    if (rc == 0) {
        CHECK(src.hp.rope_theta == 1e6f && src.hp.rope_scaling == TK_ROPE_SCALING_LINEAR &&
                  src.hp.rope_factor == 4.0f,
              "linear scaling");
        CHECK(src.gen.n_eos_ids == 2 && src.gen.eos_ids[0] == 2 && src.gen.eos_ids[1] == 7, "eos list");
        CHECK(src.gen.temperature == 0.6f && src.gen.top_p == 0.9f && src.gen.top_k == 40, "sampling");
        CHECK(!strcmp(src.arch, "llama") && src.hp.swa_window == 0, "mistral without a window is llama: %s",
              src.arch);
        tk_source_close(&src);
    }
    /* mistral with a sliding window (also named by architectures only); a
     * null window is none; a llama config's window is ignored */
    rc = hf_case(root, "mistral_swa",
                 "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":4096," CFG_REST "}", NULL,
                 NULL, NULL, &src, &err);
    CHECK(rc == 0, "mistral swa: %s", err.msg);
    if (rc == 0) {
        CHECK(!strcmp(src.arch, "mistral") && src.hp.swa_window == 4096, "mistral window: %s %d", src.arch,
              src.hp.swa_window);
        tk_source_close(&src);
    }
    rc = hf_case(root, "mistral_arch",
                 "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":8,\"sliding_window\":16," CFG_REST "}",
                 NULL, NULL, NULL, &src, &err);
    CHECK(rc == 0, "mistral by architectures: %s", err.msg);
    if (rc == 0) {
        CHECK(!strcmp(src.arch, "mistral") && src.hp.swa_window == 16, "mistral by architectures: %s %d", src.arch,
              src.hp.swa_window);
        tk_source_close(&src);
    }
    rc = hf_case(root, "mistral_null",
                 "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":null," CFG_REST "}", NULL,
                 NULL, NULL, &src, &err);
    CHECK(rc == 0 && !strcmp(src.arch, "llama") && src.hp.swa_window == 0, "null window: %s", err.msg);
    if (rc == 0) tk_source_close(&src);
    rc = hf_case(root, "llama_swa", "{\"model_type\":\"llama\",\"hidden_size\":8,\"sliding_window\":4," CFG_REST "}",
                 NULL, NULL, NULL, &src, &err);
    CHECK(rc == 0 && !strcmp(src.arch, "llama") && src.hp.swa_window == 0, "llama ignores sliding_window");
    if (rc == 0) tk_source_close(&src);
    hf_fail(root, "swa_zero", "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":0," CFG_REST "}",
            NULL, NULL, NULL, "'sliding_window' = 0 is out of range", NULL);
    hf_fail(root, "swa_neg", "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":-3," CFG_REST "}",
            NULL, NULL, NULL, "'sliding_window' = -3 is out of range", NULL);
    hf_fail(root, "swa_str", "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":\"4k\"," CFG_REST "}",
            NULL, NULL, NULL, "'sliding_window' must be an integer", NULL);
    hf_fail(root, "swa_big",
            "{\"model_type\":\"mistral\",\"hidden_size\":8,\"sliding_window\":99999999999," CFG_REST "}", NULL,
            NULL, NULL, "out of range", NULL);
    rc = hf_case(root, "llama3",
                 "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,"
                 "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                 "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}," CFG_REST "}",
                 NULL, NULL, "{\"eos_token_id\":3}", &src, &err);
    CHECK(rc == 0, "llama3: %s", err.msg);
    if (rc == 0) {
        CHECK(src.hp.rope_scaling == TK_ROPE_SCALING_LLAMA3 && src.hp.rope_factor == 8.0f &&
                  src.hp.rope_low_freq_factor == 1.0f && src.hp.rope_high_freq_factor == 4.0f &&
                  src.hp.rope_orig_ctx == 8192,
              "llama3 scaling");
        CHECK(src.gen.n_eos_ids == 1 && src.gen.eos_ids[0] == 3, "eos int");
        tk_source_close(&src);
    }

    /* config.json problems */
    hf_fail(root, "nocfg", NULL, NULL, NULL, NULL, "cannot open", "config.json");
    hf_fail(root, "nohidden", "{\"model_type\":\"llama\"," CFG_REST "}", NULL, NULL, NULL,
            "config.json: missing 'hidden_size'", NULL);
    hf_fail(root, "cfgarray", "[1,2]", NULL, NULL, NULL, "not a JSON object", "config.json");
    hf_fail(root, "cfgjson", "{\"model_type\":", NULL, NULL, NULL, "invalid JSON", "config.json");
    hf_fail(root, "cfgstr", "{\"model_type\":\"llama\",\"hidden_size\":\"8\"," CFG_REST "}", NULL, NULL, NULL,
            "'hidden_size' must be an integer", "config.json");
    hf_fail(root, "cfgzero", "{\"model_type\":\"llama\",\"hidden_size\":0," CFG_REST "}", NULL, NULL, NULL,
            "'hidden_size' = 0 is out of range", "config.json");
    hf_fail(root, "cfghuge", "{\"model_type\":\"llama\",\"hidden_size\":99999999999999," CFG_REST "}", NULL, NULL,
            NULL, "out of range", "config.json");
    hf_fail(root, "cfgtype", "{\"model_type\":\"gpt2\",\"hidden_size\":8," CFG_REST "}", NULL, NULL, NULL,
            "unsupported model_type 'gpt2'", "config.json");
    hf_fail(root, "cfgarch", "{\"architectures\":[\"GPT2LMHeadModel\"],\"hidden_size\":8," CFG_REST "}", NULL,
            NULL, NULL, "architectures", "config.json");
    hf_fail(root, "cfgnotype", "{\"hidden_size\":8," CFG_REST "}", NULL, NULL, NULL, "missing 'model_type'",
            "config.json");
    hf_fail(root, "cfgeps", CFG_OK ",\"rms_norm_eps\":-1}", NULL, NULL, NULL, "'rms_norm_eps' = -1 is out of range",
            "config.json");
    hf_fail(root, "cfgdup", CFG_OK ",\"hidden_size\":8}", NULL, NULL, NULL, "invalid JSON", "config.json");
    hf_fail(root, "cfgtheta", CFG_OK ",\"rope_theta\":\"big\"}", NULL, NULL, NULL, "'rope_theta' must be a number",
            "config.json");
    hf_fail(root, "cfgtie", CFG_OK ",\"tie_word_embeddings\":\"yes\"}", NULL, NULL, NULL,
            "'tie_word_embeddings' must be a boolean", "config.json");
    hf_fail(root, "cfgrope", CFG_OK ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}", NULL, NULL, NULL,
            "unsupported rope_scaling.rope_type 'dynamic'", "config.json");
    hf_fail(root, "cfgropeparams",
            CFG_OK ",\"rope_parameters\":{\"rope_theta\":1e4,\"rope_type\":\"dynamic\",\"factor\":2}}", NULL,
            NULL, NULL, "unsupported rope_parameters.rope_type 'dynamic'", "config.json");
    hf_fail(root, "cfgropeparams3", CFG_OK ",\"rope_parameters\":{\"rope_theta\":1e4,\"rope_type\":\"llama3\"}}",
            NULL, NULL, NULL, "missing 'factor'", "config.json");
    hf_fail(root, "cfgrope3", CFG_OK ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}", NULL, NULL,
            NULL, "missing 'low_freq_factor'", "config.json");
    hf_fail(root, "cfgropelin", CFG_OK ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":-2}}", NULL, NULL,
            NULL, "'factor'", "config.json");
    hf_fail(root, "cfgkv",
            "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
            "\"num_key_value_heads\":3,\"intermediate_size\":16,\"vocab_size\":10}",
            NULL, NULL, NULL, "not a multiple", "config.json");
    hf_fail(root, "cfgheads",
            "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":3,"
            "\"intermediate_size\":16,\"vocab_size\":10}",
            NULL, NULL, NULL, "not a multiple", "config.json");
    /* config vs tensor shapes */
    hf_fail(root, "headdim", CFG_OK ",\"head_dim\":6}", NULL, NULL, NULL, "q_proj.weight' has shape [8, 8]",
            "config.json implies [12, 8]");
    tiny q6 = {.q_rows = 6};
    hf_fail(root, "qrows", CFG_OK "}", &q6, NULL, NULL, "has shape [6, 8]", "model.safetensors");
    hf_fail(root, "vocab", "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,"
            "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"intermediate_size\":16,\"vocab_size\":11}",
            NULL, NULL, NULL, "embed_tokens.weight' has shape [10, 8]", NULL);
    tiny l3 = {.layer = 3};
    hf_fail(root, "layer", CFG_OK "}", &l3, NULL, NULL, "layer 3 but num_hidden_layers is 1", "model.safetensors");
    /* weights */
    tiny now = {.no_weights = true};
    hf_fail(root, "noweights", CFG_OK "}", &now, NULL, NULL, "no model.safetensors", NULL);
    hf_fail(root, "idxmissing", CFG_OK "}", &now,
            "{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\"}}", NULL,
            "cannot open", "model-00001-of-00002.safetensors");
    hf_fail(root, "idxdotdot", CFG_OK "}", NULL, "{\"weight_map\":{\"model.norm.weight\":\"../ok/model.safetensors\"}}",
            NULL, "not a plain file name", "../ok/model.safetensors");
    hf_fail(root, "idxabs", CFG_OK "}", NULL, "{\"weight_map\":{\"model.norm.weight\":\"/etc/passwd\"}}", NULL,
            "not a plain file name", NULL);
    hf_fail(root, "idxdot", CFG_OK "}", NULL, "{\"weight_map\":{\"model.norm.weight\":\"..\"}}", NULL,
            "not a plain file name", NULL);
    hf_fail(root, "idxnotin", CFG_OK "}", NULL, "{\"weight_map\":{\"model.nope.weight\":\"model.safetensors\"}}",
            NULL, "not present in its shard", NULL);
    hf_fail(root, "idxnomap", CFG_OK "}", NULL, "{\"metadata\":{}}", NULL, "missing 'weight_map'",
            "index.json");
    hf_fail(root, "idxtype", CFG_OK "}", NULL, "{\"weight_map\":{\"model.norm.weight\":5}}", NULL,
            "is not a string", "index.json");
    hf_fail(root, "idxjson", CFG_OK "}", NULL, "{\"weight_map\":", NULL, "invalid JSON", "index.json");
    /* generation_config.json */
    hf_fail(root, "geneos", CFG_OK "}", NULL, NULL, "{\"eos_token_id\":\"2\"}", "eos_token_id",
            "generation_config.json");
    hf_fail(root, "geneosrange", CFG_OK "}", NULL, NULL, "{\"eos_token_id\":[1,10]}", "outside the vocabulary",
            "generation_config.json");
    hf_fail(root, "genmany", CFG_OK "}", NULL, NULL, "{\"eos_token_id\":[1,1,1,1,1,1,1,1,1]}", "too many",
            "generation_config.json");
    hf_fail(root, "gentemp", CFG_OK "}", NULL, NULL, "{\"temperature\":-1}", "'temperature'",
            "generation_config.json");
    hf_fail(root, "genjson", CFG_OK "}", NULL, NULL, "nope", "invalid JSON", "generation_config.json");
    /* A corrupt shard surfaces the safetensors error with its path. */
    {
        char dir[512], path[600];
        snprintf(dir, sizeof dir, "%s/corrupt", root);
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/config.json", dir);
        write_str(path, CFG_OK "}");
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_raw(path, 1 << 20, "{}", 0);
        rc = tk_hf_source_open(dir, &src, &err);
        CHECK(rc != 0 && strstr(err.msg, "model.safetensors") && strstr(err.msg, "past end"),
              "corrupt shard: %s", err.msg);
        if (rc == 0) tk_source_close(&src);
    }
    /* Not a directory. */
    rc = tk_hf_source_open(tk_shared("models/code-target/config.json"), &src, &err);
    CHECK(rc != 0 && strstr(err.msg, "not a directory"), "not a dir: %s", err.msg);
}

int main(void) {
    char probe[1024];
    snprintf(probe, sizeof probe, "%s", tk_shared("models/code-target/model.safetensors"));
    bool have_models = access(probe, R_OK) == 0;

    char root[] = "/tmp/tk_test_hf_XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp failed");
        TK_TEST_END();
    }
    check_hostile_st(root);
    check_dirs(root);
    if (have_models) {
        expect target = {"code-target", 288, 6, 6, 2, 48, 768, 32000};
        expect draft = {"code-draft", 128, 2, 4, 2, 32, 384, 32000};
        check_model(&target);
        check_model(&draft);
        check_llama2c("code-target");
        check_llama2c("code-draft");
        check_sharded(root);
    } else {
        printf("shared models not found (%s): real-model checks skipped\n", probe);
    }
    rm_tree(root);
    TK_TEST_END();
}
