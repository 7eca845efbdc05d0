/* tokamak chat: a multi-turn conversation in the terminal.
 *
 * Every turn renders the whole conversation with the model's chat template
 * and submits it as one request; the engine's prefix cache serves what the
 * previous turn's prompt left in the KV blocks, so the chat keeps no KV
 * state of its own.  Answers stream as the request's events arrive. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <tokamak.h>

#include "common/args.h"
#include "common/strbuf.h"
#include "commands.h"

/* The only mutable global: set by the SIGINT handler, polled by the
 * generation loop and checked when reading a line is interrupted. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

/* While reading a line the handler must interrupt the read (no SA_RESTART)
 * so that Ctrl-C is seen at the prompt; while an answer streams, writes to
 * the terminal must not fail with EINTR, so they restart. */
static void set_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

typedef struct chat {
    tk_engine *e;
    const tk_tokenizer *tok;
    tk_chat_template *tmpl;
    const char *bos_text, *eos_text;
    char *system;        /* NULL: none */
    tk_chat_msg *turns;  /* user, assistant, user, ...; contents malloc'd, roles static */
    int n_turns, cap_turns;
    tk_sampling sampling;
    int n_predict;       /* tokens per answer; <= 0: until end of turn or context */
    int reserve;         /* tokens kept free for the answer when fitting the conversation */
    int ctx_len;
    bool interactive;    /* stdin and stdout are terminals: prompts, colours, raw answers */
    bool colour;
    FILE *info;          /* command output and notices: stdout interactively, else stderr */
    /* the last answer */
    bool answered;
    int n_prompt, n_cached, n_generated;
    double prompt_seconds, gen_seconds;
} chat;

static void notice(const chat *c, const char *fmt, ...) TK_PRINTF(2, 3);
static void notice(const chat *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (c->colour) fputs("\033[33m", stderr);
    vfprintf(stderr, fmt, ap);
    if (c->colour) fputs("\033[0m", stderr);
    fputc('\n', stderr);
    va_end(ap);
}

static int push_turn(chat *c, const char *role, const char *content, size_t len) {
    if (c->n_turns == c->cap_turns) {
        int cap = c->cap_turns ? 2 * c->cap_turns : 16;
        tk_chat_msg *t = realloc(c->turns, (size_t)cap * sizeof *t);
        if (!t) return -1;
        c->turns = t;
        c->cap_turns = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return -1;
    memcpy(s, content, len);
    s[len] = 0;
    c->turns[c->n_turns++] = (tk_chat_msg){.role = role, .content = s};
    return 0;
}

static void pop_turn(chat *c) { free((char *)c->turns[--c->n_turns].content); }

/* Drops the first n turns (whole user/assistant exchanges). */
static void drop_turns(chat *c, int n) {
    for (int i = 0; i < n; i++) free((char *)c->turns[i].content);
    memmove(c->turns, c->turns + n, (size_t)(c->n_turns - n) * sizeof *c->turns);
    c->n_turns -= n;
}

static void clear_turns(chat *c) {
    while (c->n_turns) pop_turn(c);
}

/* The conversation (system prompt first, then the turns from `first` on)
 * rendered for the next answer and tokenized.  The template writes special
 * tokens such as <s> as text, so they are parsed; BOS is prepended when the
 * model wants it and the template did not write it.  *ids is malloc'd. */
static int build_prompt(const chat *c, int first, int32_t **ids, int *n, tk_err *err) {
    int nt = c->n_turns - first, nm = nt + (c->system ? 1 : 0);
    tk_chat_msg *msgs = malloc((size_t)nm * sizeof *msgs);
    if (!msgs) return tk_err_set(err, "out of memory");
    int k = 0;
    if (c->system) msgs[k++] = (tk_chat_msg){.role = "system", .content = c->system};
    if (nt) memcpy(msgs + k, c->turns + first, (size_t)nt * sizeof *msgs);
    char *text = NULL;
    tk_err terr;
    int rc = tk_chat_template_render(c->tmpl, msgs, nm, true, c->bos_text, c->eos_text, &text, &terr);
    free(msgs);
    if (rc) return tk_err_set(err, "the chat template fails to render the conversation: %s", terr.msg);
    size_t len = strlen(text);
    int cnt = 0;
    *ids = NULL;
    rc = tk_tokenize(c->tok, text, len, false, true, NULL, 0, &cnt, err);
    int bos = tk_tokenizer_bos(c->tok);
    int32_t *buf = rc ? NULL : malloc(((size_t)cnt + 1) * sizeof *buf);
    if (!rc && !buf) rc = tk_err_set(err, "out of memory");
    if (!rc) rc = tk_tokenize(c->tok, text, len, false, true, buf + 1, cnt, &cnt, err);
    free(text);
    if (rc) {
        free(buf);
        return -1;
    }
    bool add_bos = tk_tokenizer_add_bos(c->tok) && bos >= 0 && (cnt == 0 || buf[1] != bos);
    if (add_bos) buf[0] = bos;
    else memmove(buf, buf + 1, (size_t)cnt * sizeof *buf);
    *ids = buf;
    *n = cnt + add_bos;
    return 0;
}

/* Writes answer text: as it is on a terminal; in the line protocol (piped)
 * newlines and backslashes are escaped so that each answer is one line. */
static void write_answer(const chat *c, const char *s, int len) {
    if (c->interactive) {
        fwrite(s, 1, (size_t)len, stdout);
    } else {
        for (int i = 0; i < len; i++) {
            if (s[i] == '\n') fputs("\\n", stdout);
            else if (s[i] == '\r') fputs("\\r", stdout);
            else if (s[i] == '\\') fputs("\\\\", stdout);
            else fputc(s[i], stdout);
        }
    }
    fflush(stdout);
}

typedef struct answer {
    chat *c;
    tk_strbuf text;
    bool done, started;
    const char *finish; /* "stop", "length", "cancelled", "error" */
    double t_first;
} answer;

static void on_event(void *user, const tk_event *ev) {
    answer *a = user;
    if (ev->token >= 0 && !a->started) {
        a->started = true;
        a->t_first = tk_clock_seconds(TK_CLOCK_WALL);
    }
    if (ev->text_len > 0) {
        write_answer(a->c, ev->text, ev->text_len);
        tk_strbuf_add(&a->text, ev->text, (size_t)ev->text_len);
    }
    a->c->n_prompt = ev->n_prompt_tokens;
    a->c->n_cached = ev->n_cached_tokens;
    a->c->n_generated = ev->n_generated;
    if (ev->done) {
        a->done = true;
        a->finish = ev->finish_reason;
    }
}

/* Fits the conversation, whose last turn is the new user message, into the
 * context with room for the answer: the oldest exchanges go first, the
 * system prompt never.  Returns 1 if the message does not fit even alone,
 * -1 on an error; either way the message is removed and the earlier turns
 * stay. */
static int fit_prompt(chat *c, int32_t **ids, int *n, tk_err *err) {
    int first = 0;
    for (;;) {
        if (build_prompt(c, first, ids, n, err)) {
            pop_turn(c);
            return -1;
        }
        if (*n + c->reserve <= c->ctx_len) break;
        free(*ids);
        *ids = NULL;
        if (first == c->n_turns - 1) {
            pop_turn(c);
            notice(c, "[the message does not fit: it takes %d tokens%s, and the context holds %d with %d kept "
                      "for the answer]", *n, c->system ? " with the system prompt" : "", c->ctx_len, c->reserve);
            return 1;
        }
        first += 2; /* a user message and its answer */
    }
    if (first) {
        drop_turns(c, first);
        notice(c, "[context full: dropped the oldest %d exchange%s to make room]", first / 2, first > 2 ? "s" : "");
    }
    return 0;
}

/* Answers the user message just pushed.  Returns 0, 1 when the message was
 * refused (it is removed again and the chat goes on), -1 on an engine
 * failure (fatal). */
static int respond(chat *c) {
    tk_err err;
    int32_t *ids = NULL;
    int n = 0;
    /* Invalid UTF-8 is named in the message, not at an offset of the rendered conversation. */
    const char *msg = c->turns[c->n_turns - 1].content;
    if (tk_tokenize(c->tok, msg, strlen(msg), false, true, NULL, 0, &n, &err)) {
        pop_turn(c);
        notice(c, "[the message: %s]", err.msg);
        return 1;
    }
    int frc = fit_prompt(c, &ids, &n, &err);
    if (frc < 0) notice(c, "[%s]", err.msg);
    if (frc) return 1;
    tk_request_params rp = {.prompt = ids, .n_prompt = n, .max_tokens = c->n_predict > 0 ? c->n_predict : 0,
                            .n = 1, .sampling = c->sampling, .top_logprobs = -1};
    answer a = {.c = c};
    uint64_t id;
    g_interrupted = 0;
    double t0 = tk_clock_seconds(TK_CLOCK_WALL);
    int rc = tk_engine_submit(c->e, &rp, on_event, &a, &id, &err);
    free(ids);
    if (rc) {
        pop_turn(c);
        notice(c, "[%s]", err.msg);
        return 1;
    }
    bool cancelled = false;
    while (!a.done) {
        if (g_interrupted && !cancelled) {
            tk_engine_cancel(c->e, id);
            cancelled = true;
        }
        if (tk_engine_step(c->e, &err) < 0) {
            tk_strbuf_free(&a.text);
            fprintf(stderr, "\ntokamak chat: %s\n", err.msg);
            return -1;
        }
    }
    double t1 = tk_clock_seconds(TK_CLOCK_WALL);
    if (!a.started) a.t_first = t1;
    c->answered = true;
    c->prompt_seconds = a.t_first - t0;
    c->gen_seconds = t1 - a.t_first;
    fputc('\n', stdout);
    fflush(stdout);
    if (!strcmp(a.finish, "cancelled")) notice(c, "[stopped]");
    else if (!strcmp(a.finish, "length") && c->n_predict > 0) notice(c, "[cut at -n %d tokens]", c->n_predict);
    else if (!strcmp(a.finish, "length")) notice(c, "[cut: the context is full]");
    else if (strcmp(a.finish, "stop")) notice(c, "[the answer failed]");
    /* An answer stopped before it said anything takes its question along;
     * otherwise what was shown is what the model said. */
    rc = 0;
    if (a.text.len == 0 && cancelled) pop_turn(c);
    else if (a.text.failed || push_turn(c, "assistant", a.text.len ? a.text.data : "", a.text.len)) rc = -1;
    tk_strbuf_free(&a.text);
    if (rc) fprintf(stderr, "tokamak chat: out of memory\n");
    return rc;
}

static int save_chat(const chat *c, const char *path, tk_err *err) {
    json_t *msgs = json_array(), *root = json_object();
    int rc = msgs && root && !json_object_set(root, "messages", msgs) ? 0 : -1;
    for (int i = -1; !rc && i < c->n_turns; i++) {
        if (i < 0 && !c->system) continue;
        const char *role = i < 0 ? "system" : c->turns[i].role, *content = i < 0 ? c->system : c->turns[i].content;
        json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
        if (!m || json_array_append_new(msgs, m)) rc = -1;
    }
    if (rc) tk_err_set(err, "cannot build the JSON (invalid UTF-8 in the system prompt, or out of memory)");
    else if (json_dump_file(root, path, JSON_INDENT(2)))
        rc = tk_err_set(err, "cannot write %s: %s", path, strerror(errno));
    json_decref(msgs);
    json_decref(root);
    return rc;
}

/* Replaces the conversation (system prompt included) with a file's:
 * {"messages": [...]} or a bare array, an optional system message first,
 * then user and assistant alternating, ending with an answer. */
static int load_chat(chat *c, const char *path, tk_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root && jerr.line > 0) return tk_err_set(err, "%s: %s (line %d)", path, jerr.text, jerr.line);
    if (!root) return tk_err_set(err, "%s", jerr.text);
    json_t *msgs = json_is_array(root) ? root : json_object_get(root, "messages");
    int rc = json_is_array(msgs) ? 0 : tk_err_set(err, "%s: expected {\"messages\": [...]} or an array", path);
    size_t n = rc ? 0 : json_array_size(msgs);
    const char *first = json_string_value(json_object_get(json_array_get(msgs, 0), "role"));
    size_t has_sys = first && !strcmp(first, "system");
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        bool sys = i == 0 && has_sys;
        size_t k = i - has_sys; /* position among the user/assistant turns */
        const char *want = k % 2 ? "assistant" : "user";
        if (!role || !content) rc = tk_err_set(err, "%s: message %zu needs string role and content", path, i + 1);
        else if (!sys && strcmp(role, want))
            rc = tk_err_set(err, "%s: message %zu is '%s', expected '%s' (a system message may only come first, "
                                 "then user and assistant alternate)", path, i + 1, role, want);
        else if (!sys && i + 1 == n && k % 2 == 0)
            rc = tk_err_set(err, "%s: the conversation ends with an unanswered user message", path);
    }
    if (!rc) {
        clear_turns(c);
        free(c->system);
        c->system = NULL;
        for (size_t i = 0; !rc && i < n; i++) {
            json_t *m = json_array_get(msgs, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            const char *content = json_string_value(json_object_get(m, "content"));
            size_t len = json_string_length(json_object_get(m, "content"));
            if (!strcmp(role, "system")) rc = (c->system = strdup(content)) ? 0 : -1;
            else rc = push_turn(c, !strcmp(role, "user") ? "user" : "assistant", content, len);
        }
        if (rc) tk_err_set(err, "out of memory");
    }
    json_decref(root);
    return rc;
}

/* The context used is the conversation's as it stands, rendered ready for
 * the next answer (templates may not render an empty one: that is 0). */
static void print_stats(const chat *c) {
    FILE *f = c->info;
    fprintf(f, "conversation: %d exchange%s%s\n", c->n_turns / 2, c->n_turns / 2 == 1 ? "" : "s",
            c->system ? " and a system prompt" : "");
    int32_t *ids = NULL;
    int n = 0;
    tk_err err;
    if (c->n_turns + !!c->system && build_prompt(c, 0, &ids, &n, &err))
        fprintf(f, "context: unknown (%s)\n", err.msg);
    else fprintf(f, "context: %d of %d tokens used\n", n, c->ctx_len);
    free(ids);
    if (!c->answered) return;
    fprintf(f, "last answer: %d tokens in %.2f s (%.1f tokens/s)\n", c->n_generated, c->gen_seconds,
            c->gen_seconds > 0 ? c->n_generated / c->gen_seconds : 0);
    fprintf(f, "its prompt: %d tokens, %d cached, %.2f s to the first token\n", c->n_prompt, c->n_cached,
            c->prompt_seconds);
}

static void print_help(FILE *f) {
    fprintf(f, "/reset         forget the conversation (the system prompt stays)\n"
               "/system TEXT   set the system prompt (/system alone removes it)\n"
               "/save FILE     write the conversation as JSON ({\"messages\": [{\"role\", \"content\"}]})\n"
               "/load FILE     replace the conversation with one written by /save\n"
               "/stats         speed of the last answer, prompt and cached tokens, context used\n"
               "/help          this list\n"
               "/quit          leave (also Ctrl-D, or Ctrl-C twice at the prompt)\n"
               "Ctrl-C stops an answer.\n");
}

enum { CMD_GO_ON, CMD_QUIT, CMD_FAILED };

/* A line starting with '/'. */
static int run_command(chat *c, char *line) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = 0;
    arg += strspn(arg, " \t");
    tk_err err;
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return CMD_QUIT;
    if (!strcmp(line, "/help")) {
        print_help(c->info);
    } else if (!strcmp(line, "/reset")) {
        clear_turns(c);
        fprintf(c->info, "[conversation cleared]\n");
    } else if (!strcmp(line, "/system")) {
        free(c->system);
        c->system = *arg ? strdup(arg) : NULL;
        if (*arg && !c->system) return CMD_FAILED;
        fprintf(c->info, *arg ? "[system prompt set]\n" : "[system prompt removed]\n");
    } else if (!strcmp(line, "/save") || !strcmp(line, "/load")) {
        if (!*arg) {
            notice(c, "[%s needs a file name]", line);
            return CMD_FAILED;
        }
        if (line[1] == 's' ? save_chat(c, arg, &err) : load_chat(c, arg, &err)) {
            notice(c, "[%s]", err.msg);
            return CMD_FAILED;
        }
        int nm = c->n_turns + (c->system ? 1 : 0);
        fprintf(c->info, "[%s %d message%s %s %s]\n", line[1] == 's' ? "saved" : "loaded", nm, nm == 1 ? "" : "s",
                line[1] == 's' ? "to" : "from", arg);
    } else if (!strcmp(line, "/stats")) {
        print_stats(c);
    } else {
        notice(c, "[unknown command %s; /help lists them]", line);
        return CMD_FAILED;
    }
    fflush(c->info);
    return CMD_GO_ON;
}

/* The read-answer loop.  Returns the exit status: 0, or 1 after an engine
 * failure or, in the line protocol, after a message or command failed. */
static int chat_loop(chat *c) {
    char *line = NULL;
    size_t cap = 0;
    bool armed = false; /* Ctrl-C was pressed at the prompt: a second one leaves */
    int status = 0;
    for (;;) {
        if (c->interactive) {
            fputs(c->colour ? "\033[1m>>> \033[0m" : ">>> ", stdout);
            fflush(stdout);
        }
        g_interrupted = 0;
        set_sigint(false);
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        set_sigint(true);
        if (len < 0 && errno == EINTR && g_interrupted) {
            clearerr(stdin);
            if (armed) break;
            armed = true;
            if (c->interactive) fputc('\n', stdout);
            notice(c, "[Ctrl-C again or Ctrl-D to leave]");
            continue;
        }
        if (len < 0) {
            if (c->interactive) fputc('\n', stdout);
            break;
        }
        armed = false;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (line[0] == '/') {
            int r = run_command(c, line);
            if (r == CMD_QUIT) break;
            if (r == CMD_FAILED && !c->interactive) status = 1;
            continue;
        }
        if (push_turn(c, "user", line, (size_t)len)) {
            fprintf(stderr, "tokamak chat: out of memory\n");
            status = 1;
            break;
        }
        int r = respond(c);
        if (r < 0) {
            status = 1;
            break;
        }
        if (r > 0 && !c->interactive) {
            fputc('\n', stdout); /* one line out for each line in */
            fflush(stdout);
            status = 1;
        }
    }
    free(line);
    return status;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak chat -m MODEL [options]\n"
            "  -m, --model PATH      .gguf, llama2.c .bin, or Hugging Face directory\n"
            "  --tokenizer PATH      tokenizer override\n"
            "  --chat-template FILE  Jinja chat template overriding the model's\n"
            "  --system TEXT         system prompt\n"
            "  -n, --n-predict N     tokens per answer at most (default -1: until end of turn or context)\n"
            "  --temp T              temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K             (default 40; 0 = off)\n"
            "  --top-p P             (default 0.95; 1 = off)\n"
            "  --min-p P             (default 0.05; 0 = off)\n"
            "  --repeat-penalty R    (default 1 = off)   --repeat-last-n N (default 64)\n"
            "  --seed S              RNG seed (same seed and conversation, same answer)\n"
            "  -c, --ctx-size N      context length (default: the model's)\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  --kv-type T           KV cache storage: f16 (default), f32, q8_0\n"
            "When the conversation and the answer's room (-n, or a quarter of the context)\n"
            "do not fit the context, the oldest exchanges are dropped (the system prompt stays).\n"
            "Type /help in the chat for its commands.  When stdin or stdout is not a terminal,\n"
            "each input line is one message and each answer is printed on one line, with\n"
            "newlines and backslashes escaped as \\n and \\\\.\n");
}

int tk_cmd_chat(int argc, char **argv) {
    tk_engine_config cfg = {0};
    chat c = {.n_predict = -1};
    tk_sampling_defaults(&c.sampling);
    const char *tmpl_file = NULL, *system = NULL;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &cfg.model_path),
        TK_OPT_S("--tokenizer", &cfg.tokenizer_path),
        TK_OPT_S("--chat-template", &tmpl_file),
        TK_OPT_S("--system", &system),
        TK_OPT_I("-n|--n-predict", &c.n_predict, -1, 1 << 30),
        TK_OPTS_SAMPLING(&c.sampling),
        TK_OPT_U("--seed", &c.sampling.seed),
        TK_OPT_I("-c|--ctx-size", &cfg.ctx_len, 1, 1 << 24),
        TK_OPT_I("-t|--threads", &cfg.n_threads, 1, 1024),
        TK_OPT_S("--kv-type", &cfg.kv_type),
    };
    const tk_cli cli = {.cmd = "chat", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, cfg.model_path, "-m MODEL")) return 2;

    tk_err err;
    /* --chat-template is read first: a bad file fails before the model loads. */
    char *tmpl_src = NULL;
    if (tmpl_file && tk_read_file(tmpl_file, &tmpl_src, NULL, &err)) {
        fprintf(stderr, "tokamak chat: --chat-template: %s\n", err.msg);
        return 1;
    }
    if (tmpl_src && tk_chat_template_parse(tmpl_src, &c.tmpl, &err)) {
        fprintf(stderr, "tokamak chat: chat template %s: %s\n", tmpl_file, err.msg);
        free(tmpl_src);
        return 1;
    }
    free(tmpl_src);
    cfg.require_tokenizer = true;
    int status = 1;
    /* The engine's threads start with SIGINT blocked, so that it reaches
     * this thread and interrupts the read at the prompt. */
    sigset_t sigint, old_mask;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigint, &old_mask);
    int orc = tk_engine_open(&cfg, &c.e, &err);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (orc) {
        fprintf(stderr, "tokamak chat: %s\n", err.msg);
        tk_chat_template_free(c.tmpl);
        return 1;
    }
    c.tok = tk_engine_tokenizer(c.e);
    c.ctx_len = tk_engine_ctx_len(c.e);
    c.reserve = c.n_predict > 0 ? c.n_predict : c.ctx_len / 4;
    const char *model_tmpl = c.tmpl ? NULL : tk_engine_chat_template(c.e);
    if (!c.tmpl && !model_tmpl) {
        fprintf(stderr, "tokamak chat: the model has no chat template; give one with --chat-template FILE\n");
        goto out;
    }
    if (model_tmpl && tk_chat_template_parse(model_tmpl, &c.tmpl, &err)) {
        fprintf(stderr, "tokamak chat: the model's chat template does not parse (%s); give one with "
                        "--chat-template FILE\n", err.msg);
        goto out;
    }
    if (c.reserve >= c.ctx_len) {
        fprintf(stderr, "tokamak chat: -n %d leaves no room for the conversation in a context of %d tokens\n",
                c.n_predict, c.ctx_len);
        goto out;
    }
    int bos = tk_tokenizer_bos(c.tok), eos = tk_tokenizer_eos(c.tok);
    c.bos_text = bos >= 0 ? tk_tokenizer_piece(c.tok, bos) : "";
    c.eos_text = eos >= 0 ? tk_tokenizer_piece(c.tok, eos) : "";
    if (system && !(c.system = strdup(system))) {
        fprintf(stderr, "tokamak chat: out of memory\n");
        goto out;
    }
    c.interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    c.colour = c.interactive && isatty(STDERR_FILENO) && !getenv("NO_COLOR");
    c.info = c.interactive ? stdout : stderr;
    if (c.interactive)
        fprintf(stderr, "tokamak chat: context %d tokens; /help for commands, Ctrl-C stops an answer, "
                        "Ctrl-D leaves\n", c.ctx_len);
    status = chat_loop(&c);
    clear_turns(&c);
    free(c.turns);
    free(c.system);
out:
    tk_chat_template_free(c.tmpl);
    tk_engine_close(c.e);
    return status;
}
