/* Minimal test harness: CHECK records failures and keeps going; TK_TEST_END
 * prints "N passed, N failed" and returns the exit code. */
#ifndef TK_TEST_H
#define TK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tk_test_pass, tk_test_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            tk_test_pass++;                                                \
        } else {                                                           \
            tk_test_fail++;                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

/* Skip the whole test program (ctest shows it as passed; the reason is printed). */
#define TK_SKIP(...)                                                       \
    do {                                                                   \
        printf("SKIP: ");                                                  \
        printf(__VA_ARGS__);                                               \
        printf("\n");                                                      \
        return 0;                                                          \
    } while (0)

#define TK_TEST_END()                                                      \
    do {                                                                   \
        printf("%d passed, %d failed\n", tk_test_pass, tk_test_fail);      \
        return tk_test_fail ? 1 : 0;                                       \
    } while (0)

/* Path under the shared assets directory (static buffer per call site is
 * fine for tests). */
static inline const char *tk_shared(const char *rel) {
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ & 7];
    const char *root = getenv("TK_SHARED_DIR");
    snprintf(b, 1024, "%s/%s", root ? root : TK_SHARED_DIR, rel);
    return b;
}

#endif
