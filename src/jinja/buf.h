/* Growable byte buffer with a hard size cap, used for template output and
 * string building.  The cap bounds what an untrusted template can produce. */
#ifndef TK_CHAT_BUF_H
#define TK_CHAT_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

typedef struct cj_buf {
    char *p;
    size_t n, cap;
    size_t limit;
    /* optional shared memory account: capacity is charged to *acct and
     * growth fails past acct_limit (so buffers count toward a render's
     * memory limit together with its values) */
    size_t *acct, acct_limit;
    /* optional shared work account: capacity growth is added to *work
     * (also when it fails) and fails past work_limit */
    uint64_t *work, work_limit;
} cj_buf;

void cj_buf_init(cj_buf *b, size_t limit);
/* All return 0, or -1 when the cap would be exceeded or memory ran out
 * (the buffer is left unchanged). */
int cj_buf_put(cj_buf *b, const void *s, size_t n);
int cj_buf_putc(cj_buf *b, char c);
/* n copies of c (a chunk at a time: an indent of millions costs no per-byte calls) */
int cj_buf_fill(cj_buf *b, char c, size_t n);
int cj_buf_puts(cj_buf *b, const char *s);
int cj_buf_printf(cj_buf *b, const char *fmt, ...) TK_PRINTF(2, 3);
void cj_buf_free(cj_buf *b);

#endif
