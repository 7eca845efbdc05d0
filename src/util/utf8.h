/* UTF-8 encoding shared by the tokenizer and the chat templates. */
#ifndef TK_UTIL_UTF8_H
#define TK_UTIL_UTF8_H

#include <stdint.h>

/* Writes code point cp (<= 0x10FFFF) as 1-4 bytes; returns the count. */
int tk_utf8_encode(uint32_t cp, char *out);

#endif
