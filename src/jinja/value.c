/* Value allocation and reference counting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

void cj_ctx_init(cj_ctx *c, tk_err *err) {
    memset(c, 0, sizeof *c);
    c->err = err;
    c->live.next = c->live.prev = &c->live;
}

int cj_fail_work(cj_ctx *c) {
    return cj_fail(c, "template exceeded its work limit (%llu bytes allocated or scanned)",
                   (unsigned long long)c->work_limit);
}

int cj_check_cancel(cj_ctx *c) {
    if (c->cancel && atomic_load_explicit(c->cancel, memory_order_relaxed))
        return cj_fail(c, "chat template rendering cancelled");
    return 0;
}

int cj_charge_work(cj_ctx *c, size_t n) {
    c->work += n;
    return c->work > c->work_limit ? cj_fail_work(c) : cj_check_cancel(c);
}

static int charge(cj_ctx *c, size_t n) {
    if (n > c->mem_limit || c->mem > c->mem_limit - n)
        return cj_fail(c, "template exceeded its memory limit (%zu bytes)", c->mem_limit);
    if (cj_charge_work(c, n)) return -1;
    c->mem += n;
    return 0;
}

static void *obj_new(cj_ctx *c, cj_kind kind, size_t size) {
    if (charge(c, size)) return NULL;
    cj_obj *o = calloc(1, size);
    if (!o) {
        c->mem -= size;
        cj_fail(c, "out of memory");
        return NULL;
    }
    o->rc = 1;
    o->kind = (uint8_t)kind;
    o->bytes = size;
    o->next = c->live.next;
    o->prev = &c->live;
    c->live.next->prev = o;
    c->live.next = o;
    return o;
}

static cj_obj *heap(cj_val v) {
    switch (v.kind) {
    case CJ_UNDEF:
    case CJ_STR:
    case CJ_LIST:
    case CJ_DICT:
    case CJ_NS:
    case CJ_LOOP:
    case CJ_MACRO: return v.o;
    default: return NULL;
    }
}

cj_val cj_ref(cj_val v) {
    cj_obj *o = heap(v);
    if (o) o->rc++;
    return v;
}

/* Frees the object's own storage (not what it references). */
static void free_raw(cj_ctx *c, cj_obj *o) {
    c->mem -= o->bytes;
    switch (o->kind) {
    case CJ_LIST: free(((cj_list *)o)->v); break;
    case CJ_DICT:
    case CJ_NS:
        free(((cj_dict *)o)->k);
        free(((cj_dict *)o)->v);
        break;
    default: break;
    }
    free(o);
}

static void release_children(cj_ctx *c, cj_obj *o) {
    switch (o->kind) {
    case CJ_LIST: {
        cj_list *l = (cj_list *)o;
        for (size_t i = 0; i < l->n; i++) cj_unref(c, l->v[i]);
        break;
    }
    case CJ_DICT:
    case CJ_NS: {
        cj_dict *d = (cj_dict *)o;
        for (size_t i = 0; i < d->n; i++) {
            cj_unref(c, d->k[i]);
            cj_unref(c, d->v[i]);
        }
        break;
    }
    case CJ_LOOP: cj_unref(c, ((cj_loop *)o)->items); break;
    default: break;
    }
}

void cj_unref(cj_ctx *c, cj_val v) {
    cj_obj *o = heap(v);
    if (!o || --o->rc) return;
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->next = c->dead;
    c->dead = o;
    if (c->draining) return;
    c->draining = true;
    while (c->dead) {
        cj_obj *d = c->dead;
        c->dead = d->next;
        release_children(c, d);
        free_raw(c, d);
    }
    c->draining = false;
}

void cj_ctx_sweep(cj_ctx *c) {
    while (c->dead) {
        cj_obj *d = c->dead;
        c->dead = d->next;
        free_raw(c, d);
    }
    cj_obj *o = c->live.next;
    while (o != &c->live) {
        cj_obj *next = o->next;
        free_raw(c, o);
        o = next;
    }
    c->live.next = c->live.prev = &c->live;
    memset(c->ascii, 0, sizeof c->ascii); /* they were live objects */
}

int cj_new_str(cj_ctx *c, const char *s, size_t n, cj_val *out) {
    if (n > c->mem_limit) return cj_fail(c, "template exceeded its memory limit (%zu bytes)", c->mem_limit);
    cj_str *o = obj_new(c, CJ_STR, sizeof(cj_str) + n + 1);
    if (!o) return -1;
    o->len = n;
    if (n && s) memcpy(o->s, s, n); /* s == NULL: zeroed, for the caller to fill */
    o->s[n] = 0;
    out->kind = CJ_STR;
    out->o = &o->h;
    return 0;
}

int cj_new_strz(cj_ctx *c, const char *s, cj_val *out) { return cj_new_str(c, s, strlen(s), out); }

int cj_new_undef(cj_ctx *c, cj_val *out, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cj_val s;
    if (cj_new_strz(c, msg, &s)) return -1;
    out->kind = CJ_UNDEF;
    out->o = s.o;
    return 0;
}

/* Grows an array of cj_val owned by object o, charging the memory. */
static int grow(cj_ctx *c, cj_obj *o, cj_val **arr, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 4;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / sizeof(cj_val)) return cj_fail(c, "template exceeded its memory limit");
        ncap *= 2;
    }
    size_t extra = (ncap - *cap) * sizeof(cj_val);
    if (charge(c, extra)) return -1;
    cj_val *p = realloc(*arr, ncap * sizeof(cj_val));
    if (!p) {
        c->mem -= extra;
        return cj_fail(c, "out of memory");
    }
    *arr = p;
    o->bytes += extra;
    *cap = ncap;
    return 0;
}

int cj_new_list(cj_ctx *c, size_t cap, bool tuple, cj_val *out) {
    cj_list *l = obj_new(c, CJ_LIST, sizeof *l);
    if (!l) return -1;
    l->tuple = tuple;
    out->kind = CJ_LIST;
    out->o = &l->h;
    if (cap && grow(c, &l->h, &l->v, &l->cap, cap)) {
        cj_unref(c, *out);
        *out = cj_undef();
        return -1;
    }
    return 0;
}

int cj_list_push(cj_ctx *c, cj_val list, cj_val item) {
    cj_list *l = cj_L(list);
    if (grow(c, &l->h, &l->v, &l->cap, l->n + 1)) {
        cj_unref(c, item);
        return -1;
    }
    l->v[l->n++] = item;
    return 0;
}

int cj_new_dict(cj_ctx *c, cj_kind kind, cj_val *out) {
    cj_dict *d = obj_new(c, kind, sizeof *d);
    if (!d) return -1;
    out->kind = kind;
    out->o = &d->h;
    return 0;
}

int cj_dict_find(cj_ctx *c, cj_val dv, cj_val key, long *out) {
    cj_dict *d = cj_D(dv);
    *out = -1;
    for (size_t i = 0; i < d->n; i++) {
        bool eq;
        if (cj_eq(c, d->k[i], key, &eq)) return -1;
        if (eq) {
            *out = (long)i;
            return 0;
        }
    }
    return 0;
}

long cj_dict_find_str(cj_val dv, const char *key, size_t len) {
    cj_dict *d = cj_D(dv);
    for (size_t i = 0; i < d->n; i++) {
        cj_val k = d->k[i];
        if (k.kind == CJ_STR && cj_S(k)->len == len && memcmp(cj_S(k)->s, key, len) == 0) return (long)i;
    }
    return -1;
}

int cj_dict_set(cj_ctx *c, cj_val dv, cj_val key, cj_val value) {
    cj_dict *d = cj_D(dv);
    long i;
    if (cj_dict_find(c, dv, key, &i)) {
        cj_unref(c, key);
        cj_unref(c, value);
        return -1;
    }
    if (i >= 0) {
        cj_unref(c, key);
        cj_val old = d->v[i];
        d->v[i] = value;
        cj_unref(c, old);
        return 0;
    }
    size_t kcap = d->cap, vcap = d->cap;
    if (grow(c, &d->h, &d->k, &kcap, d->n + 1) || grow(c, &d->h, &d->v, &vcap, d->n + 1)) {
        /* keep the two arrays' capacity in step: cap is the smaller one */
        d->cap = kcap < vcap ? kcap : vcap;
        cj_unref(c, key);
        cj_unref(c, value);
        return -1;
    }
    d->cap = kcap;
    d->k[d->n] = key;
    d->v[d->n] = value;
    d->n++;
    return 0;
}

int cj_new_loop(cj_ctx *c, cj_val items, int64_t length, cj_val *out) {
    cj_loop *l = obj_new(c, CJ_LOOP, sizeof *l);
    if (!l) return -1;
    l->items = cj_ref(items);
    l->length = length;
    out->kind = CJ_LOOP;
    out->o = &l->h;
    return 0;
}

int cj_new_macro(cj_ctx *c, const cj_node *def, cj_val *out) {
    cj_macro *m = obj_new(c, CJ_MACRO, sizeof *m);
    if (!m) return -1;
    m->def = def;
    out->kind = CJ_MACRO;
    out->o = &m->h;
    return 0;
}
