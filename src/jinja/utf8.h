/* UTF-8 helpers with Python str semantics: templates index, slice and
 * measure strings in code points, and Python's notion of whitespace decides
 * what strip()/split() and Jinja's whitespace control remove. */
#ifndef TK_CHAT_UTF8_H
#define TK_CHAT_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes the code point at s[*i] and advances *i.  An invalid byte decodes
 * alone as U+DC80+byte (like Python's surrogateescape), so bytes that are
 * not UTF-8 pass through slicing and copying unchanged. */
uint32_t cj_u8_next(const char *s, size_t n, size_t *i);
/* Encodes cp into out (4 bytes); U+DC80..U+DCFF become the raw byte again,
 * other surrogates become U+FFFD.  Returns the byte count. */
int cj_u8_put(uint32_t cp, char out[4]);
size_t cj_u8_count(const char *s, size_t n);
/* Python str.isspace() for one code point. */
bool cj_isspace(uint32_t cp);
/* Length in bytes of the whitespace character at s[i] (0 if none). */
size_t cj_space_len(const char *s, size_t n, size_t i);

#endif
