/* tokamak tokenize: print the tokens of a text (like llama-tokenize). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak tokenize -m MODEL [-p TEXT | -f FILE] [options]\n"
            "\n"
            "  -m, --model PATH      .gguf, Hugging Face directory, tokenizer.json or llama2.c checkpoint\n"
            "  -p, --prompt TEXT     text to tokenize\n"
            "  -f, --file FILE       read the text from FILE ('-' = stdin)\n"
            "      --tokenizer PATH  tokenizer to use instead of the model's own\n"
            "                        (tokenizer.json, directory, .gguf or llama2.c tokenizer.bin)\n"
            "      --ids             print only the ids, as [1, 2, 3]\n"
            "      --no-bos          do not add the BOS token\n"
            "      --no-parse-special  treat special-token text as plain text\n"
            "      --lines           tokenize every input line separately (without its newline)\n"
            "                        and print one line of space-separated ids per input line\n");
}

static int read_all(const char *path, char **out, size_t *len) {
    if (strcmp(path, "-") != 0) {
        tk_err err;
        if (tk_read_file(path, out, len, &err)) {
            fprintf(stderr, "tokamak tokenize: %s\n", err.msg);
            return -1;
        }
        return 0;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return -1;
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static int encode(const tk_tokenizer *t, const char *s, size_t n, bool bos, bool special,
                  int32_t **ids, int *cap, int *count, tk_err *err) {
    if (tk_tokenize(t, s, n, bos, special, *ids, *cap, count, err)) return -1;
    if (*count > *cap) {
        int nc = *count + 64;
        int32_t *ni = realloc(*ids, (size_t)nc * sizeof *ni);
        if (!ni) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            return -1;
        }
        *ids = ni;
        *cap = nc;
        if (tk_tokenize(t, s, n, bos, special, *ids, *cap, count, err)) return -1;
    }
    return 0;
}

int tk_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *tokpath = NULL;
    bool ids_only = false, no_bos = false, no_special = false, lines = false;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &model),
        TK_OPT_S("-p|--prompt", &prompt),
        TK_OPT_S("-f|--file", &file),
        TK_OPT_S("--tokenizer", &tokpath),
        TK_OPT_ON("--ids", &ids_only),
        TK_OPT_ON("--no-bos", &no_bos),
        TK_OPT_ON("--no-parse-special", &no_special),
        TK_OPT_ON("--lines", &lines),
    };
    const tk_cli cli = {.cmd = "tokenize", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, model ? model : tokpath, "-m MODEL (or --tokenizer PATH)")) return 2;
    if (!!prompt + !!file != 1) {
        fprintf(stderr, "tokamak tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 1;
    }

    tk_err err = {{0}};
    tk_tokenizer *t = NULL;
    if (tk_tokenizer_open(model, tokpath, &t, &err)) {
        fprintf(stderr, "tokamak tokenize: %s\n", err.msg);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    if (file) {
        if (read_all(file, &text, &len)) {
            tk_tokenizer_free(t);
            return 1;
        }
    } else {
        len = strlen(prompt);
        text = malloc(len + 1);
        if (!text) {
            tk_tokenizer_free(t);
            return 1;
        }
        memcpy(text, prompt, len + 1);
    }

    bool bos = !no_bos && tk_tokenizer_add_bos(t);
    bool special = !no_special;
    int32_t *ids = NULL;
    int cap = 0, count = 0, rc = 0;
    if (lines) {
        size_t start = 0;
        int lineno = 1;
        while (start < len) {
            const char *nl = memchr(text + start, '\n', len - start);
            size_t end = nl ? (size_t)(nl - text) : len;
            if (encode(t, text + start, end - start, bos, special, &ids, &cap, &count, &err)) {
                fprintf(stderr, "tokamak tokenize: line %d: %s\n", lineno, err.msg);
                rc = 1;
                break;
            }
            for (int i = 0; i < count; i++) printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
            start = end + 1;
            lineno++;
        }
    } else if (encode(t, text, len, bos, special, &ids, &cap, &count, &err)) {
        fprintf(stderr, "tokamak tokenize: %s\n", err.msg);
        rc = 1;
    } else if (ids_only) {
        putchar('[');
        for (int i = 0; i < count; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else {
        char local[1024];
        for (int i = 0; i < count; i++) {
            char *buf = local;
            int n = tk_token_to_bytes(t, -1, ids[i], true, local, sizeof local);
            if (n < 0 && (buf = malloc((size_t)-n)) != NULL) n = tk_token_to_bytes(t, -1, ids[i], true, buf, -n);
            if (n < 0 || !buf) n = 0;
            printf("%6d -> '%.*s'\n", ids[i], n, buf ? buf : "");
            if (buf != local) free(buf);
        }
    }
    if (fflush(stdout) != 0) rc = 1;
    free(ids);
    free(text);
    tk_tokenizer_free(t);
    return rc;
}
