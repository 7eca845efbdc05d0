/* Growable byte buffer for building HTTP bodies, SSE chunks, Prometheus
 * text and SVG.  Allocation failure is sticky: once an append fails, the
 * buffer stays "failed" and every later append is a no-op, so builders can
 * append freely and check once at the end. */
#ifndef TK_SBUF_H
#define TK_SBUF_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define TK_SBUF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TK_SBUF_PRINTF(a, b)
#endif

typedef struct tk_sbuf {
    char *data;   /* NUL-terminated when len > 0 */
    size_t len, cap;
    bool failed;
} tk_sbuf;

void tk_sbuf_free(tk_sbuf *b);
void tk_sbuf_reset(tk_sbuf *b); /* keeps the allocation */
bool tk_sbuf_reserve(tk_sbuf *b, size_t extra);
void tk_sbuf_add(tk_sbuf *b, const void *p, size_t n);
void tk_sbuf_adds(tk_sbuf *b, const char *s);
void tk_sbuf_printf(tk_sbuf *b, const char *fmt, ...) TK_SBUF_PRINTF(2, 3);
/* Drops the first n bytes. */
void tk_sbuf_consume(tk_sbuf *b, size_t n);

#endif
