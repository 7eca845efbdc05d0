/* Growable byte buffer for building HTTP bodies, SSE chunks, Prometheus
 * text and SVG.  Allocation failure is sticky: once an append fails, the
 * buffer stays "failed" and every later append is a no-op, so builders can
 * append freely and check once at the end. */
#ifndef TK_STRBUF_H
#define TK_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define TK_SBUF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TK_SBUF_PRINTF(a, b)
#endif

typedef struct tk_strbuf {
    char *data;   /* NUL-terminated when len > 0 */
    size_t len, cap;
    bool failed;
} tk_strbuf;

void tk_strbuf_free(tk_strbuf *b);
void tk_strbuf_reset(tk_strbuf *b); /* keeps the allocation */
bool tk_strbuf_reserve(tk_strbuf *b, size_t extra);
void tk_strbuf_add(tk_strbuf *b, const void *p, size_t n);
void tk_strbuf_adds(tk_strbuf *b, const char *s);
void tk_strbuf_printf(tk_strbuf *b, const char *fmt, ...) TK_SBUF_PRINTF(2, 3);
/* Drops the first n bytes. */
void tk_strbuf_consume(tk_strbuf *b, size_t n);

#endif
