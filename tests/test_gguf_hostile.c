/* The GGUF reader against corrupted and hostile files, built byte by byte in
 * a temporary directory, plus a writer -> reader round trip.  Every bad file
 * must be rejected with an error that names the file and the problem; none
 * may crash or read out of bounds (run under ASan/UBSan to check the latter;
 * ASan also aborts on any absurdly large malloc). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "formats/source.h"
#include "model/model.h"
#include "tk_test.h"
#include <tokamak.h> /* tk_mapfile, tk_read_file */

/* ---- byte builder ---- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n) nc *= 2;
        b->p = realloc(b->p, nc);
        if (!b->p) abort();
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void b_le(buf *b, uint64_t v, int n) {
    unsigned char x[8];
    for (int i = 0; i < n; i++) x[i] = (unsigned char)(v >> (8 * i));
    b_put(b, x, (size_t)n);
}
static void b_u8(buf *b, uint8_t v) { b_le(b, v, 1); }
static void b_u32(buf *b, uint32_t v) { b_le(b, v, 4); }
static void b_u64(buf *b, uint64_t v) { b_le(b, v, 8); }
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) b_u8(b, 0);
}
static void b_pad(buf *b, size_t align) {
    while (b->n % align) b_u8(b, 0);
}
static void b_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_kv_u32(buf *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, TK_GGUF_U32);
    b_u32(b, v);
}
static void b_kv_f32(buf *b, const char *key, float v) {
    b_str(b, key);
    b_u32(b, TK_GGUF_F32);
    b_put(b, &v, sizeof v);
}
static void b_kv_str(buf *b, const char *key, const char *v) {
    b_str(b, key);
    b_u32(b, TK_GGUF_STRING);
    b_str(b, v);
}
static void b_tinfo(buf *b, const char *name, uint32_t ndim, const uint64_t *dims, uint32_t type,
                    uint64_t offset) {
    b_str(b, name);
    b_u32(b, ndim);
    for (uint32_t i = 0; i < ndim; i++) b_u64(b, dims[i]);
    b_u32(b, type);
    b_u64(b, offset);
}

/* ---- files ---- */

static char tmpdir[256];
static char path_buf[512];

static const char *tmp_path(const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", tmpdir, name);
    return path_buf;
}

static const char *write_file(const char *name, const void *p, size_t n) {
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return path;
}

/* Opens `b` as a file and expects rejection with a message containing the
 * path and `want` (case-sensitive substring). */
static void expect_fail(const char *label, const buf *b, const char *want) {
    const char *path = write_file("bad.gguf", b->p, b->n);
    tk_gguf *g = NULL;
    tk_err err = {{0}};
    int rc = tk_gguf_open(path, &g, &err);
    CHECK(rc == -1 && g == NULL, "%s: accepted", label);
    CHECK(strstr(err.msg, path) != NULL, "%s: error does not name the file: %s", label, err.msg);
    CHECK(strstr(err.msg, want) != NULL, "%s: error '%s' lacks '%s'", label, err.msg, want);
    if (getenv("TK_TEST_VERBOSE")) printf("%-28s -> %s\n", label, err.msg);
    if (g) tk_gguf_close(g);
}

static tk_gguf *expect_ok(const char *label, const buf *b) {
    const char *path = write_file("ok.gguf", b->p, b->n);
    tk_gguf *g = NULL;
    tk_err err = {{0}};
    CHECK(tk_gguf_open(path, &g, &err) == 0, "%s: rejected: %s", label, err.msg);
    return g;
}

/* A small valid file: 2 KVs, one F32 [4, 2] tensor.  The pieces are
 * parameterized so each case changes one thing. */
typedef struct variant {
    uint32_t version;
    uint64_t n_tensors, n_kv;
    uint32_t ndim;
    uint64_t dims[5];
    uint32_t type;
    uint64_t offset;
    size_t data_bytes;
} variant;

static variant base_variant(void) {
    variant v = {3, 1, 2, 2, {4, 2, 1, 1, 1}, TK_F32, 0, 32};
    return v;
}

static void build(buf *b, const variant *v) {
    b->n = 0;
    b_header(b, v->version, v->n_tensors, v->n_kv);
    b_kv_str(b, "general.architecture", "llama");
    b_kv_u32(b, "test.value", 7);
    b_tinfo(b, "w", v->ndim, v->dims, v->type, v->offset);
    b_pad(b, 32);
    for (size_t i = 0; i < v->data_bytes; i++) b_u8(b, (uint8_t)i);
}

static void test_structure(void) {
    buf b = {0};
    variant v = base_variant();
    build(&b, &v);
    tk_gguf *g = expect_ok("base file", &b);
    if (g) {
        CHECK(tk_gguf_n_tensors(g) == 1 && tk_gguf_n_kv(g) == 2, "base counts");
        const tk_tensor *t = tk_gguf_find_tensor(g, "w");
        CHECK(t && t->nbytes == 32 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->ndim == 2,
              "base tensor");
        tk_gguf_close(g);
    }
    v.version = 2;
    build(&b, &v);
    g = expect_ok("version 2", &b);
    tk_gguf_close(g);

    /* magic and version */
    v = base_variant();
    build(&b, &v);
    memcpy(b.p, "GGUX", 4);
    expect_fail("wrong magic", &b, "not a GGUF file");
    b.n = 2;
    expect_fail("2-byte file", &b, "not a GGUF file");
    b.n = 0;
    expect_fail("empty file", &b, "empty");
    v.version = 1;
    build(&b, &v);
    expect_fail("version 1", &b, "version 1 is not supported");
    v.version = 4;
    build(&b, &v);
    expect_fail("version 4", &b, "unsupported GGUF version 4");
    v.version = 0x03000000;
    build(&b, &v);
    expect_fail("big-endian", &b, "big-endian");

    /* absurd counts fail before allocating */
    v = base_variant();
    v.n_tensors = (uint64_t)1 << 60;
    build(&b, &v);
    expect_fail("n_tensors 2^60", &b, "implausible n_tensors");
    v.n_tensors = UINT64_MAX;
    build(&b, &v);
    expect_fail("n_tensors 2^64-1", &b, "implausible n_tensors");
    v = base_variant();
    v.n_kv = (uint64_t)1 << 60;
    build(&b, &v);
    expect_fail("n_kv 2^60", &b, "implausible n_kv");
    v = base_variant();
    v.n_kv = 3; /* claims one more KV than present: the tensor info is misread */
    build(&b, &v);
    expect_fail("n_kv off by one", &b, ""); /* any clean error naming the file */
    v = base_variant();
    v.n_tensors = 2; /* a second tensor info that is not there */
    build(&b, &v);
    expect_fail("n_tensors off by one", &b, "tensor");

    /* tensor info fields */
    v = base_variant();
    v.ndim = 5;
    v.dims[4] = 1;
    build(&b, &v);
    expect_fail("ndim 5", &b, "n_dims 5 out of range");
    v = base_variant();
    v.ndim = 0;
    build(&b, &v);
    expect_fail("ndim 0", &b, "n_dims 0 out of range");
    v = base_variant();
    v.ndim = 3;
    v.dims[0] = v.dims[1] = v.dims[2] = (uint64_t)1 << 32;
    build(&b, &v);
    expect_fail("dims overflow", &b, "element count overflows");
    v = base_variant();
    v.dims[0] = (uint64_t)1 << 31;
    v.dims[1] = (uint64_t)1 << 31;
    build(&b, &v);
    expect_fail("byte size overflow", &b, "data size overflows");
    v = base_variant();
    v.dims[1] = 0;
    build(&b, &v);
    expect_fail("zero dim", &b, "dimension 1 is 0");
    v = base_variant();
    v.dims[0] = (uint64_t)1 << 63;
    build(&b, &v);
    expect_fail("dim 2^63", &b, "dimension 0 is");
    v = base_variant();
    v.type = 99;
    build(&b, &v);
    expect_fail("unknown type", &b, "unknown tensor type 99");
    v.type = 16;
    build(&b, &v);
    expect_fail("unsupported type", &b, "IQ2_XXS (16) is not supported");
    v = base_variant();
    v.type = TK_Q4_0;
    v.dims[0] = 33;
    v.dims[1] = 1;
    build(&b, &v);
    expect_fail("Q4_0 ne0 33", &b, "not a multiple of the Q4_0 block size 32");
    v = base_variant();
    v.offset = 4;
    v.data_bytes = 64;
    build(&b, &v);
    expect_fail("misaligned offset", &b, "offset 4 is not aligned to 32");

    /* data range */
    v = base_variant();
    v.data_bytes = 31;
    build(&b, &v);
    expect_fail("data one byte short", &b, "extends past end of file");
    v = base_variant();
    v.offset = (uint64_t)1 << 62;
    build(&b, &v);
    expect_fail("offset 2^62", &b, "past end of file");
    v = base_variant();
    v.offset = UINT64_MAX - 31; /* aligned; offset + size wraps */
    build(&b, &v);
    expect_fail("offset wraps", &b, "past end of file");
    v = base_variant();
    v.data_bytes = 0;
    build(&b, &v);
    b.n -= 8; /* drop part of the padding: data section starts past EOF */
    expect_fail("no data section", &b, "past end of file");
    free(b.p);
}

static void test_metadata(void) {
    buf b = {0};
    /* key with absurd length */
    b_header(&b, 3, 0, 1);
    b_u64(&b, (uint64_t)1 << 63);
    b_put(&b, "abc", 3);
    b_zeros(&b, 32);
    expect_fail("key length 2^63", &b, "string length 9223372036854775808");
    /* string value with absurd length */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, TK_GGUF_STRING);
    b_u64(&b, UINT64_MAX);
    b_put(&b, "xyz", 3);
    expect_fail("string length 2^64-1", &b, "string length");
    /* empty key, NUL in key */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "", 1);
    expect_fail("empty key", &b, "is empty");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_u64(&b, 3);
    b_put(&b, "a\0b", 3);
    b_u32(&b, TK_GGUF_U8);
    b_u8(&b, 1);
    expect_fail("NUL in key", &b, "NUL");
    /* unknown value type */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_u32(&b, 0);
    expect_fail("value type 13", &b, "unknown value type 13");
    /* invalid bool */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, TK_GGUF_BOOL);
    b_u8(&b, 2);
    expect_fail("bool 2", &b, "invalid bool");
    /* absurd array lengths: fixed-size, strings, arrays */
    static const struct { uint32_t et; uint64_t n; const char *want; } arrs[] = {
        {TK_GGUF_U32, (uint64_t)1 << 62, "array of 4611686018427387904 uint32"},
        {TK_GGUF_U64, UINT64_MAX, "array of"},
        {TK_GGUF_STRING, (uint64_t)1 << 61, "array of 2305843009213693952 strings"},
        {TK_GGUF_ARRAY, (uint64_t)1 << 60, "array of 1152921504606846976 arrays"},
        {77, 1, "unknown array element type 77"},
    };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        b.n = 0;
        b_header(&b, 3, 0, 1);
        b_str(&b, "arr");
        b_u32(&b, TK_GGUF_ARRAY);
        b_u32(&b, arrs[i].et);
        b_u64(&b, arrs[i].n);
        b_zeros(&b, 64);
        expect_fail(arrs[i].want, &b, arrs[i].want);
    }
    /* nested arrays: 2 levels parse (kept undecoded), 20 levels are refused */
    b.n = 0;
    b_header(&b, 3, 0, 2);
    b_str(&b, "nested");
    b_u32(&b, TK_GGUF_ARRAY);
    b_u32(&b, TK_GGUF_ARRAY);
    b_u64(&b, 2);
    b_u32(&b, TK_GGUF_U32);
    b_u64(&b, 1);
    b_u32(&b, 5);
    b_u32(&b, TK_GGUF_STRING);
    b_u64(&b, 2);
    b_str(&b, "x");
    b_str(&b, "yz");
    b_kv_u32(&b, "after", 9);
    tk_gguf *g = expect_ok("nested arrays", &b);
    if (g) {
        const tk_gguf_kv *kv = tk_gguf_find(g, "nested");
        int64_t after = 0;
        CHECK(kv && kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_ARRAY && kv->arr_n == 2 &&
                  tk_gguf_get_int(g, "after", &after) == 0 && after == 9,
              "nested array skipped correctly");
        tk_gguf_close(g);
    }
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_str(&b, "deep");
    b_u32(&b, TK_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) {
        b_u32(&b, TK_GGUF_ARRAY);
        b_u64(&b, 1);
    }
    b_u32(&b, TK_GGUF_U8);
    b_u64(&b, 0);
    expect_fail("deep nesting", &b, "nested deeper");

    /* duplicates */
    b.n = 0;
    b_header(&b, 3, 0, 2);
    b_kv_u32(&b, "same", 1);
    b_kv_u32(&b, "same", 2);
    expect_fail("duplicate key", &b, "duplicate metadata key 'same'");
    b.n = 0;
    uint64_t dims[1] = {8};
    b_header(&b, 3, 2, 0);
    b_tinfo(&b, "t", 1, dims, TK_F32, 0);
    b_tinfo(&b, "t", 1, dims, TK_F32, 32);
    b_pad(&b, 32);
    b_zeros(&b, 64);
    expect_fail("duplicate tensor", &b, "duplicate tensor name 't'");

    /* alignment: bad values and types; a valid non-default one */
    static const struct { uint32_t type; uint64_t v; const char *want; } al[] = {
        {TK_GGUF_U32, 0, "must be non-zero"},
        {TK_GGUF_U32, 3, "general.alignment 3 is invalid"},
        {TK_GGUF_U64, (uint64_t)1 << 40, "is invalid"},
        {TK_GGUF_F32, 0x42800000, "general.alignment has type float32"},
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        b.n = 0;
        b_header(&b, 3, 0, 1);
        b_str(&b, "general.alignment");
        b_u32(&b, al[i].type);
        b_le(&b, al[i].v, al[i].type == TK_GGUF_U64 ? 8 : 4);
        expect_fail(al[i].want, &b, al[i].want);
    }
    for (int misaligned = 0; misaligned < 2; misaligned++) {
        b.n = 0;
        b_header(&b, 3, 2, 1);
        b_kv_u32(&b, "general.alignment", 64);
        b_tinfo(&b, "a", 1, dims, TK_F32, 0);
        b_tinfo(&b, "b", 1, dims, TK_F32, misaligned ? 32 : 64);
        b_pad(&b, 64);
        b_zeros(&b, 128);
        if (misaligned) {
            expect_fail("offset aligned to 32, not 64", &b, "offset 32 is not aligned to 64");
        } else {
            g = expect_ok("alignment 64", &b);
            if (g) {
                CHECK(tk_gguf_alignment(g) == 64 && tk_gguf_tensor_file_offset(g, 1) % 64 == 0,
                      "alignment 64 offsets");
                tk_gguf_close(g);
            }
        }
    }
    free(b.p);
}

/* Every prefix of a valid file that cuts into the metadata or the tensor
 * data must be rejected; prefixes that only drop trailing padding may load. */
static void truncations(const char *label, const unsigned char *data, size_t size, size_t data_end,
                        const size_t *positions, size_t n_positions) {
    int rejected = 0, checked = 0;
    for (size_t k = 0; k < n_positions; k++) {
        const size_t cut = positions[k];
        if (cut >= size) continue;
        const char *path = write_file("trunc.gguf", data, cut);
        tk_gguf *g = NULL;
        tk_err err = {{0}};
        const int rc = tk_gguf_open(path, &g, &err);
        checked++;
        if (cut < data_end) {
            CHECK(rc == -1 && strstr(err.msg, path), "%s: truncated at %zu: rc %d, '%s'", label, cut, rc,
                  err.msg);
            rejected += rc == -1;
        }
        if (g) tk_gguf_close(g);
    }
    CHECK(checked > 0 && rejected > 0, "%s: %d truncations checked", label, checked);
}

static size_t data_end_of(const char *path) {
    tk_gguf *g = NULL;
    tk_err err;
    size_t end = 0;
    if (tk_gguf_open(path, &g, &err)) return 0;
    for (size_t i = 0; i < tk_gguf_n_tensors(g); i++) {
        size_t e = tk_gguf_tensor_file_offset(g, i) + tk_gguf_tensor_at(g, i)->nbytes;
        if (e > end) end = e;
    }
    tk_gguf_close(g);
    return end;
}

/* Writer round trip: every metadata type the writer supports, several
 * tensor types and shapes. */
static void test_writer(const char *keep_path) {
    tk_gguf_writer *w = tk_gguf_writer_new();
    CHECK(w != NULL, "writer_new");
    const char *strs[] = {"alpha", "", "\xc4\xa0t\xc3\xa9", "zzzz"};
    const float fv[] = {1.5f, -2.25f, 0.0f, 3.4028235e38f, 1e-45f};
    const int32_t iv[] = {-1, 0, INT32_MAX, INT32_MIN};
    int rc = 0;
    rc |= tk_gguf_set_str(w, "general.architecture", "llama");
    rc |= tk_gguf_set_u32(w, "t.u32", 1);
    rc |= tk_gguf_set_u32(w, "t.u32", 0xDEADBEEFu); /* replaces, no duplicate */
    rc |= tk_gguf_set_i32(w, "t.i32", -123456);
    rc |= tk_gguf_set_f32(w, "t.f32", 0.1f);
    rc |= tk_gguf_set_bool(w, "t.true", true);
    rc |= tk_gguf_set_bool(w, "t.false", false);
    rc |= tk_gguf_set_str(w, "t.str", "h\xc3\xa9llo world");
    rc |= tk_gguf_set_str(w, "t.empty", "");
    rc |= tk_gguf_set_arr_str(w, "t.astr", strs, 4);
    rc |= tk_gguf_set_arr_f32(w, "t.af32", fv, 5);
    rc |= tk_gguf_set_arr_i32(w, "t.ai32", iv, 4);
    rc |= tk_gguf_set_arr_str(w, "t.astr0", NULL, 0);
    rc |= tk_gguf_set_arr_f32(w, "t.af320", NULL, 0);
    CHECK(rc == 0, "setters");

    /* tensors */
    float f32[8 * 3], big[64 * 2], q8_in[64 * 2];
    for (int i = 0; i < 24; i++) f32[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 128; i++) q8_in[i] = sinf((float)i * 0.37f) * 2.0f;
    unsigned char f16[32 * 2], bf16[16 * 2], q8[2 * 2 * 34], q4k[2 * 144];
    float h[32], bh[16];
    for (int i = 0; i < 32; i++) h[i] = (float)i / 7.0f - 1.0f;
    for (int i = 0; i < 16; i++) bh[i] = (float)i * 1.1f;
    tk_quantize_row_f16(h, f16, 32);
    tk_quantize_row_bf16(bh, bf16, 16);
    tk_quantize_row_q8_0(q8_in, q8, 128);
    for (size_t i = 0; i < sizeof q4k; i++) q4k[i] = (unsigned char)(i * 131 + 7);
    for (int i = 0; i < 128; i++) big[i] = (float)i;
    const int64_t ne_f32[] = {8, 3}, ne_f16[] = {32}, ne_bf16[] = {16}, ne_q8[] = {64, 2},
                  ne_q4k[] = {256, 2}, ne_4d[] = {2, 2, 2, 16};
    rc |= tk_gguf_add_tensor(w, "f32", TK_F32, 2, ne_f32, f32, sizeof f32);
    rc |= tk_gguf_add_tensor(w, "f16", TK_F16, 1, ne_f16, f16, sizeof f16);
    rc |= tk_gguf_add_tensor(w, "bf16", TK_BF16, 1, ne_bf16, bf16, sizeof bf16);
    rc |= tk_gguf_add_tensor(w, "q8", TK_Q8_0, 2, ne_q8, q8, sizeof q8);
    rc |= tk_gguf_add_tensor(w, "q4k", TK_Q4_K, 2, ne_q4k, q4k, sizeof q4k);
    rc |= tk_gguf_add_tensor(w, "4d", TK_F32, 4, ne_4d, big, sizeof big);
    CHECK(rc == 0, "add_tensor");

    const char *path = tmp_path("roundtrip.gguf");
    char rt_path[512];
    snprintf(rt_path, sizeof rt_path, "%s", path);
    tk_err err = {{0}};
    CHECK(tk_gguf_write(w, rt_path, &err) == 0, "write: %s", err.msg);
    if (keep_path) CHECK(tk_gguf_write(w, keep_path, &err) == 0, "write %s: %s", keep_path, err.msg);
    tk_gguf_writer_free(w);

    tk_gguf *g = NULL;
    CHECK(tk_gguf_open(rt_path, &g, &err) == 0, "reopen: %s", err.msg);
    if (!g) return;
    CHECK(tk_gguf_version(g) == 3 && tk_gguf_n_kv(g) == 13 && tk_gguf_n_tensors(g) == 6, "counts %zu",
          tk_gguf_n_kv(g));
    int64_t iv64 = 0;
    double dv = 0;
    bool bv = false;
    const tk_gguf_kv *kv = tk_gguf_find(g, "t.u32");
    CHECK(kv && kv->type == TK_GGUF_U32 && kv->v.u == 0xDEADBEEFu, "u32");
    CHECK(tk_gguf_get_int(g, "t.i32", &iv64) == 0 && iv64 == -123456 &&
              tk_gguf_find(g, "t.i32")->type == TK_GGUF_I32,
          "i32");
    CHECK(tk_gguf_get_float(g, "t.f32", &dv) == 0 && (float)dv == 0.1f &&
              tk_gguf_find(g, "t.f32")->type == TK_GGUF_F32,
          "f32");
    CHECK(tk_gguf_get_bool(g, "t.true", &bv) == 0 && bv, "bool true");
    CHECK(tk_gguf_get_bool(g, "t.false", &bv) == 0 && !bv, "bool false");
    CHECK(tk_gguf_get_bool(g, "t.u32", &bv) == -1, "bool of u32");
    char *s = tk_gguf_get_str(g, "t.str");
    CHECK(s && !strcmp(s, "h\xc3\xa9llo world"), "str");
    free(s);
    s = tk_gguf_get_str(g, "t.empty");
    CHECK(s && !strcmp(s, ""), "empty str");
    free(s);
    kv = tk_gguf_find(g, "t.astr");
    CHECK(kv && kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_STRING && kv->arr_n == 4, "astr");
    if (kv && kv->arr_strs)
        for (int i = 0; i < 4; i++)
            CHECK(kv->arr_strs[i].len == strlen(strs[i]) &&
                      !memcmp(kv->arr_strs[i].ptr, strs[i], strlen(strs[i])),
                  "astr[%d]", i);
    kv = tk_gguf_find(g, "t.af32");
    CHECK(kv && kv->arr_type == TK_GGUF_F32 && kv->arr_n == 5, "af32");
    if (kv)
        for (int i = 0; i < 5; i++) CHECK((float)tk_gguf_arr_f(kv, (uint64_t)i) == fv[i], "af32[%d]", i);
    kv = tk_gguf_find(g, "t.ai32");
    CHECK(kv && kv->arr_type == TK_GGUF_I32 && kv->arr_n == 4, "ai32");
    if (kv)
        for (int i = 0; i < 4; i++) CHECK(tk_gguf_arr_i(kv, (uint64_t)i) == iv[i], "ai32[%d]", i);
    kv = tk_gguf_find(g, "t.astr0");
    CHECK(kv && kv->arr_type == TK_GGUF_STRING && kv->arr_n == 0, "empty string array");
    kv = tk_gguf_find(g, "t.af320");
    CHECK(kv && kv->arr_type == TK_GGUF_F32 && kv->arr_n == 0, "empty f32 array");

    static const struct { const char *name; tk_dtype type; int ndim; } tw[] = {
        {"f32", TK_F32, 2}, {"f16", TK_F16, 1}, {"bf16", TK_BF16, 1},
        {"q8", TK_Q8_0, 2}, {"q4k", TK_Q4_K, 2}, {"4d", TK_F32, 4},
    };
    const void *srcs[] = {f32, f16, bf16, q8, q4k, big};
    const size_t sizes[] = {sizeof f32, sizeof f16, sizeof bf16, sizeof q8, sizeof q4k, sizeof big};
    for (int i = 0; i < 6; i++) {
        const tk_tensor *t = tk_gguf_tensor_at(g, (size_t)i);
        CHECK(t && !strcmp(t->name, tw[i].name) && t->type == tw[i].type && t->ndim == tw[i].ndim &&
                  t->nbytes == sizes[i] && !memcmp(t->data, srcs[i], sizes[i]) &&
                  tk_gguf_tensor_file_offset(g, (size_t)i) % 32 == 0,
              "tensor %s", tw[i].name);
    }
    const tk_tensor *t4 = tk_gguf_find_tensor(g, "4d");
    CHECK(t4 && t4->ne[0] == 2 && t4->ne[1] == 2 && t4->ne[2] == 2 && t4->ne[3] == 16, "4d shape");
    /* q8_0 round trip stays within half a quantization step */
    float deq[128];
    tk_dequant_row(TK_Q8_0, tk_gguf_find_tensor(g, "q8")->data, deq, 128);
    float maxerr = 0;
    for (int i = 0; i < 128; i++) maxerr = fmaxf(maxerr, fabsf(deq[i] - q8_in[i]));
    /* half a step, plus the rounding of the scale to f16 (127 * 2^-11 steps) */
    CHECK(maxerr <= 2.0f / 127.0f * 0.6f, "q8_0 error %g", maxerr);
    tk_gguf_close(g);

    /* the writer's own file, truncated at every byte */
    char *bytes = NULL;
    size_t size = 0;
    if (tk_read_file(rt_path, &bytes, &size, &err) == 0) {
        const size_t end = data_end_of(rt_path);
        size_t *pos = malloc(size * sizeof *pos);
        for (size_t i = 0; i < size; i++) pos[i] = i;
        truncations("writer file", (unsigned char *)bytes, size, end, pos, size);
        /* and random corruption of the metadata region: must never crash */
        uint32_t seed = 12345;
        for (int k = 0; k < 3000; k++) {
            char *copy = malloc(size);
            memcpy(copy, bytes, size);
            for (int m = 0; m < 1 + k % 4; m++) {
                seed = seed * 1664525u + 1013904223u;
                size_t at = (seed >> 8) % (end < size ? end : size);
                seed = seed * 1664525u + 1013904223u;
                copy[at] = (char)(k % 3 == 0 ? 0xFF : (seed >> 24));
            }
            const char *p = write_file("fuzz.gguf", copy, size);
            tk_gguf *fg = NULL;
            if (tk_gguf_open(p, &fg, &err) == 0) {
                /* accepted: every tensor must lie inside the file */
                for (size_t i = 0; i < tk_gguf_n_tensors(fg); i++)
                    CHECK(tk_gguf_tensor_file_offset(fg, i) + tk_gguf_tensor_at(fg, i)->nbytes <= size,
                          "fuzz: tensor outside file");
                tk_gguf_close(fg);
            }
            free(copy);
        }
        free(pos);
        free(bytes);
    }
    unlink(tmp_path("fuzz.gguf"));
    unlink(rt_path);

    /* writer misuse is reported by tk_gguf_write */
    w = tk_gguf_writer_new();
    const int64_t bad_ne[] = {33};
    CHECK(tk_gguf_add_tensor(w, "bad", TK_Q4_0, 1, bad_ne, q8, 18) == -1, "bad tensor accepted");
    CHECK(tk_gguf_add_tensor(w, "f32", TK_F32, 2, ne_f32, f32, sizeof f32) == 0, "add");
    CHECK(tk_gguf_add_tensor(w, "f32", TK_F32, 2, ne_f32, f32, sizeof f32) == -1, "duplicate accepted");
    CHECK(tk_gguf_write(w, tmp_path("never.gguf"), &err) == -1 && strstr(err.msg, "multiple of the Q4_0"),
          "deferred writer error: %s", err.msg);
    CHECK(access(tmp_path("never.gguf"), F_OK) != 0, "failed write left a file");
    tk_gguf_writer_free(w);
    w = tk_gguf_writer_new();
    CHECK(tk_gguf_add_tensor(w, "short", TK_F32, 2, ne_f32, f32, 8) == -1, "wrong nbytes accepted");
    tk_gguf_writer_free(w);

    /* vocab-only style file: metadata, no tensors */
    w = tk_gguf_writer_new();
    tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", strs, 4);
    CHECK(tk_gguf_write(w, tmp_path("vocab.gguf"), &err) == 0, "%s", err.msg);
    tk_gguf_writer_free(w);
    CHECK(tk_gguf_open(tmp_path("vocab.gguf"), &g, &err) == 0 && tk_gguf_n_tensors(g) == 0,
          "vocab-only reopen: %s", err.msg);
    if (g) tk_gguf_close(g);
}

static void test_fixture_truncations(void) {
    const char *src = tk_shared("gguf-fixtures/qfix-Q4_K_M.gguf");
    char *bytes = NULL;
    size_t size = 0;
    tk_err err;
    if (tk_read_file(src, &bytes, &size, &err)) {
        printf("skipping fixture truncations: %s\n", err.msg);
        return;
    }
    const size_t end = data_end_of(src);
    tk_gguf *g = NULL;
    size_t first_data = size;
    if (tk_gguf_open(src, &g, &err) == 0) {
        for (size_t i = 0; i < tk_gguf_n_tensors(g); i++)
            if (tk_gguf_tensor_file_offset(g, i) < first_data) first_data = tk_gguf_tensor_file_offset(g, i);
        tk_gguf_close(g);
    }
    /* dense in the metadata (every 13th byte), sparse in the data */
    size_t *pos = malloc((first_data / 13 + 64) * sizeof *pos), n = 0;
    for (size_t p = 0; p < first_data; p += 13) pos[n++] = p;
    for (int k = 1; k <= 40; k++) pos[n++] = first_data + (size - first_data) / 41 * (size_t)k;
    pos[n++] = end - 1;
    truncations("qfix-Q4_K_M copy", (unsigned char *)bytes, size, end, pos, n);
    free(pos);
    free(bytes);
}

/* tk_gguf_source_open: required keys are named when missing; optional ones
 * get their defaults; rope scaling is read. */
typedef struct src_case {
    const char *label;
    const char *skip_key; /* key left out */
    const char *want;     /* expected error substring, NULL = must open */
} src_case;

/* The small model below, with key `set` (if any) set to `value`. */
static int write_model_with(const char *path, const char *skip, const char *scaling, bool output,
                            uint32_t key_length, const char *set, uint32_t value, tk_err *err) {
    tk_gguf_writer *w = tk_gguf_writer_new();
    static const float emb[8 * 10];
    const int64_t ne[] = {8, 10};
    struct { const char *k; uint32_t v; } ints[] = {
        {"llama.embedding_length", 8}, {"llama.block_count", 1}, {"llama.attention.head_count", 2},
        {"llama.feed_forward_length", 16}, {"llama.context_length", 64},
    };
    if (!skip || strcmp(skip, "general.architecture")) tk_gguf_set_str(w, "general.architecture", "llama");
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!skip || strcmp(skip, ints[i].k)) tk_gguf_set_u32(w, ints[i].k, ints[i].v);
    if (!skip || strcmp(skip, "llama.attention.layer_norm_rms_epsilon"))
        tk_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    if (key_length) tk_gguf_set_u32(w, "llama.attention.key_length", key_length);
    if (scaling) {
        tk_gguf_set_str(w, "llama.rope.scaling.type", scaling);
        tk_gguf_set_f32(w, "llama.rope.scaling.factor", 4.0f);
    }
    if (set) tk_gguf_set_u32(w, set, value);
    tk_gguf_add_tensor(w, "token_embd.weight", TK_F32, 2, ne, emb, sizeof emb);
    if (output) tk_gguf_add_tensor(w, "output.weight", TK_F32, 2, ne, emb, sizeof emb);
    int rc = tk_gguf_write(w, path, err);
    tk_gguf_writer_free(w);
    return rc;
}

static int write_model(const char *path, const char *skip, const char *scaling, bool output, uint32_t key_length,
                       tk_err *err) {
    return write_model_with(path, skip, scaling, output, key_length, NULL, 0, err);
}

/* Every hyper-parameter has the Hugging Face loader's upper bound, so the
 * sizes derived from them cannot overflow; the KV pool checks its own
 * products too. */
static void test_hparam_bounds(void) {
    static const struct { const char *key; uint32_t value; const char *want; } cases[] = {
        {"llama.embedding_length", 1u << 21, "'llama.embedding_length' has invalid value 2097152 (must be in [1, 1048576])"},
        {"llama.block_count", 1u << 17, "'llama.block_count' has invalid value 131072 (must be in [1, 65536])"},
        {"llama.attention.head_count", 1u << 17, "'llama.attention.head_count' has invalid value 131072"},
        {"llama.attention.head_count_kv", 4, "'llama.attention.head_count_kv' has invalid value 4 (must be in [1, 2])"},
        {"llama.feed_forward_length", 1u << 25, "'llama.feed_forward_length' has invalid value 33554432"},
        {"llama.context_length", 1u << 27, "'llama.context_length' has invalid value 134217728"},
        {"llama.attention.key_length", 1u << 17, "'llama.attention.key_length' has invalid value 131072"},
        {"llama.vocab_size", 1u << 27, "'llama.vocab_size' has invalid value 134217728"},
        {"llama.vocab_size", 0xFFFFFFFFu, "'llama.vocab_size' has invalid value 4294967295"},
    };
    tk_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("model.gguf"));
    tk_source src;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_model_with(path, NULL, NULL, true, 0, cases[i].key, cases[i].value, &err) == 0 &&
                  tk_gguf_source_open(path, &src, &err) == -1 && strstr(err.msg, cases[i].want) &&
                  strstr(err.msg, path),
              "%s = %u: '%s'", cases[i].key, cases[i].value, err.msg);
    }
    /* each factor within bounds, their product not */
    CHECK(write_model_with(path, NULL, NULL, true, 512, "llama.attention.head_count", 1u << 16, &err) == 0 &&
              tk_gguf_source_open(path, &src, &err) == -1 &&
              strstr(err.msg, "head_count x key_length = 33554432 is above 16777216"),
          "heads x head_dim: '%s'", err.msg);
    /* the largest values still open */
    const bool opened = write_model_with(path, NULL, NULL, true, 0, "llama.context_length", 1u << 26, &err) == 0 &&
                        tk_gguf_source_open(path, &src, &err) == 0;
    CHECK(opened && src.hp.ctx_len == 1 << 26, "context 2^26: '%s'", err.msg);
    if (opened) tk_source_close(&src);
    unlink(path);

    CHECK(tk_kv_block_bytes(INT_MAX, INT_MAX, 1024, INT_MAX, TK_KV_F32) == 0, "block bytes overflow");
    CHECK(tk_kv_block_bytes(2, 4, 64, 16, TK_KV_F32) == 2 * 256 * 2 * 4 * 16, "block bytes");
    tk_kv_pool kv;
    CHECK(tk_kv_pool_init(&kv, 1 << 16, 1 << 16, 1024, 1024, INT_MAX, TK_KV_F32, false, &err) == -1 &&
              strstr(err.msg, "is too large"),
          "KV pool overflow: '%s'", err.msg);
}

static void test_source(void) {
    static const src_case cases[] = {
        {"complete", NULL, NULL},
        {"no arch", "general.architecture", "missing required key 'general.architecture'"},
        {"no dim", "llama.embedding_length", "missing required key 'llama.embedding_length'"},
        {"no layers", "llama.block_count", "missing required key 'llama.block_count'"},
        {"no heads", "llama.attention.head_count", "missing required key 'llama.attention.head_count'"},
        {"no ffn", "llama.feed_forward_length", "missing required key 'llama.feed_forward_length'"},
        {"no ctx", "llama.context_length", "missing required key 'llama.context_length'"},
        {"no eps", "llama.attention.layer_norm_rms_epsilon", "layer_norm_rms_epsilon'"},
    };
    tk_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("model.gguf"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (write_model(path, cases[i].skip_key, NULL, true, 0, &err)) {
            CHECK(0, "write: %s", err.msg);
            continue;
        }
        tk_source src;
        int rc = tk_gguf_source_open(path, &src, &err);
        if (!cases[i].want) {
            CHECK(rc == 0, "%s: %s", cases[i].label, err.msg);
            if (rc) continue;
            const tk_hparams *hp = &src.hp;
            /* defaults: kv heads = heads, head_dim = dim/heads, theta 10000,
             * vocab from token_embd (no token list) */
            CHECK(hp->n_kv_heads == 2 && hp->head_dim == 4 && hp->rope_theta == 10000.0f &&
                      hp->n_vocab == 10 && hp->norm_eps == 1e-6f && !hp->tied_output &&
                      hp->rope_scaling == TK_ROPE_SCALING_NONE && hp->rope_orig_ctx == 64,
                  "defaults");
            tk_source_close(&src);
        } else {
            CHECK(rc == -1 && strstr(err.msg, cases[i].want) && strstr(err.msg, path), "%s: '%s'",
                  cases[i].label, err.msg);
        }
    }
    /* linear rope scaling and a tied output */
    tk_source src;
    if (write_model(path, NULL, "linear", false, 0, &err) == 0 && tk_gguf_source_open(path, &src, &err) == 0) {
        CHECK(src.hp.rope_scaling == TK_ROPE_SCALING_LINEAR && src.hp.rope_factor == 4.0f &&
                  src.hp.tied_output,
              "linear scaling / tied output");
        tk_source_close(&src);
    } else {
        CHECK(0, "linear: %s", err.msg);
    }
    CHECK(write_model(path, NULL, "longrope", true, 0, &err) == 0 && tk_gguf_source_open(path, &src, &err) == -1 &&
              strstr(err.msg, "rope scaling type 'longrope'"),
          "longrope refused: %s", err.msg);
    /* a head dimension above what the forward pass's per-head buffers hold
     * is refused when the model is built from the file */
    tk_model m;
    CHECK(write_model(path, NULL, NULL, true, 2048, &err) == 0 && tk_model_load(path, &m, &err) == -1 &&
              strstr(err.msg, "head_dim 2048 is above the supported maximum"),
          "huge head_dim refused: %s", err.msg);
    unlink(path);
}

/* The 8 metadata pairs of a small Llama claiming `layers` layers. */
static void b_small_llama_kv(buf *b, uint32_t layers) {
    b_kv_str(b, "general.architecture", "llama");
    b_kv_u32(b, "llama.block_count", layers);
    b_kv_u32(b, "llama.embedding_length", 64);
    b_kv_u32(b, "llama.attention.head_count", 4);
    b_kv_u32(b, "llama.feed_forward_length", 128);
    b_kv_u32(b, "llama.context_length", 128);
    b_kv_u32(b, "llama.vocab_size", 16);
    b_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
}

/* A file claiming 2^14 layers beside 200,000 one-float tensors, none of them
 * the model's: the load looks up every vector role of every layer before it
 * finds the embedding missing.  Through a linear scan that was about 10^10
 * string compares (a 20,000-tensor file took 7 s in a release build; this
 * one minutes, past the test's 60 s limit in CMakeLists.txt); through the
 * name index, a second.  The index must also find what the scan found.
 * (2^16 layers are refused before any lookup: too few tensors, below.) */
static void test_many_tensors(void) {
    enum { N = 200000 };
    buf b = {0};
    b_header(&b, 3, N, 8);
    b_small_llama_kv(&b, 1u << 14);
    const uint64_t one = 1;
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t%06d", (i * 7919) % N); /* not in name order */
        b_tinfo(&b, name, 1, &one, TK_F32, 32 * (uint64_t)i);
    }
    b_pad(&b, 32);
    b_zeros(&b, 32 * (size_t)N);
    const char *path = write_file("many.gguf", b.p, b.n);
    free(b.p);
    tk_err err = {{0}};
    tk_source src;
    if (tk_gguf_source_open(path, &src, &err) == 0) {
        int found = 0;
        for (int i = 0; i < N; i++) {
            snprintf(name, sizeof name, "t%06d", (i * 7919) % N);
            found += tk_source_find(&src, name) == &src.tensors[i];
        }
        CHECK(found == N, "find by name: %d of %d", found, N);
        CHECK(!tk_source_find(&src, "t200000") && !tk_source_find(&src, "t") && !tk_source_find(&src, ""),
              "names that are not there");
        tk_source_close(&src);
    } else {
        CHECK(0, "many tensors: %s", err.msg);
    }
    tk_model m;
    CHECK(tk_model_load(path, &m, &err) == -1 && strstr(err.msg, "missing tensor 'token_embd.weight'"),
          "2^14 layers, 200,000 tensors: '%s'", err.msg);
    unlink(path);
}

/* A small file whose header claims 2^16 layers is refused for its tensor
 * count, before the per-layer name lookups (2^16 x roles of them). */
static void test_layers_beyond_tensors(void) {
    buf b = {0};
    b_header(&b, 3, 2, 8);
    b_small_llama_kv(&b, 1u << 16);
    const uint64_t ne[2] = {64, 16};
    b_tinfo(&b, "token_embd.weight", 2, ne, TK_F32, 0);
    b_tinfo(&b, "output_norm.weight", 1, ne, TK_F32, 4096);
    b_pad(&b, 32);
    b_zeros(&b, 4096 + 256);
    const char *path = write_file("layers.gguf", b.p, b.n);
    free(b.p);
    tk_err err = {{0}};
    tk_model m;
    CHECK(tk_model_load(path, &m, &err) == -1 && strstr(err.msg, "claims 65536 layers") &&
              strstr(err.msg, "the file has 2"),
          "2^16 layers, 2 tensors: '%s'", err.msg);
    unlink(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/tk_gguf_hostile_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_structure();
    test_metadata();
    test_writer(getenv("TK_GGUF_ROUNDTRIP_OUT"));
    test_fixture_truncations();
    test_source();
    test_hparam_bounds();
    test_many_tensors();
    test_layers_beyond_tensors();

    static const char *const names[] = {"bad.gguf", "ok.gguf", "trunc.gguf", "fuzz.gguf",
                                        "roundtrip.gguf", "never.gguf", "vocab.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    CHECK(rmdir(tmpdir) == 0, "temp dir not empty: %s", strerror(errno));
    TK_TEST_END();
}
