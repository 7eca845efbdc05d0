/* The HTTP layer (apps/server/http.c on libmicrohttpd) with the request
 * parser, tokenizer, chat template and engine behind it: the input is the
 * raw bytes a client sends on one TCP connection.
 *
 * A real server runs in-process on 127.0.0.1 (any free port), with a thread
 * stepping the engine as tokamak serve's main thread does.  What the engine
 * does per input is kept small, as it was most of an execution: the model is
 * synthesized at start-up (tokamak synth's "micro" shape: one layer of 32,
 * random weights, the aidreams260K tokenizer from the shared assets, so its
 * answers are random tokens of a real vocabulary), context 64, at most 4
 * tokens a completion (--max-tokens), and KV blocks of 16 tokens so that the
 * prefix cache serves the prompts' shared starts.  Each input is
 * written to a fresh connection, the sending side is shut down, and the
 * answer is read until the server closes the connection.  A socketpair
 * would skip MHD's own connection handling, which is part of what is
 * fuzzed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "fuzz.h"
#include "server/server.h"

static tk_engine *engine;
static tk_chat_template *tmpl;
static tk_server server;
static pthread_t stepper;
static atomic_bool stop_stepping;

static const char chatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static void *step_loop(void *arg) {
    (void)arg;
    tk_err err;
    while (!atomic_load(&stop_stepping)) {
        tk_engine_wait_for_work(engine, 20);
        tk_step_jobs_drain(&server.step_jobs);
        while (!atomic_load(&stop_stepping) && tk_engine_step(engine, &err) > 0) {
        }
    }
    return NULL;
}

static void shut_down(void) {
    tk_server_begin_stop(&server);
    for (int i = 0; i < 500 && atomic_load(&server.active) > 0; i++) usleep(10000);
    tk_server_stop(&server);
    atomic_store(&stop_stepping, true);
    pthread_join(stepper, NULL);
    tk_err err;
    while (tk_engine_step(engine, &err) > 0) {
    }
    free(server.bos_text);
    free(server.eos_text);
    tk_chat_template_free(tmpl);
    tk_engine_close(engine);
}

static void start(void) {
    tk_err err;
    char model_path[] = "/tmp/fuzz_http-model-XXXXXX";
    const int model_fd = mkstemp(model_path);
    const tk_synth_params synth = {.like = "micro", .type = "f32", .seed = 1, .shared_dir = TK_SHARED_DIR};
    if (model_fd < 0 || close(model_fd) || tk_synth_model(model_path, &synth, &err)) {
        fprintf(stderr, "fuzz_http: cannot synthesize the model in %s: %s\n", model_path,
                model_fd < 0 ? strerror(errno) : err.msg);
        abort();
    }
    tk_engine_config cfg = {
        .model_path = model_path,
        .n_threads = 1,
        .ctx_len = 64,
        .max_seqs = 4,
        .kv_block_size = 16,
        .require_tokenizer = true,
    };
    signal(SIGPIPE, SIG_IGN);
    const bool opened = tk_engine_open(&cfg, &engine, &err) == 0;
    unlink(model_path); /* the engine holds what it needs */
    if (!opened || tk_chat_template_parse(chatml, &tmpl, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    const tk_tokenizer *tok = tk_engine_tokenizer(engine);
    server.bos_text = strdup(tk_tokenizer_piece(tok, tk_tokenizer_bos(tok)));
    server.eos_text = strdup(tk_tokenizer_piece(tok, tk_tokenizer_eos(tok)));
    const tk_server_config scfg = {.host = "127.0.0.1", .port = 0, .model_name = "fuzz", .max_connections = 64,
                                   .max_tokens = 4};
    if (!server.bos_text || !server.eos_text || tk_server_start(&server, engine, tmpl, &scfg, &err)) {
        fprintf(stderr, "fuzz_http: cannot start the server: %s\n", err.msg);
        abort();
    }
    if (pthread_create(&stepper, NULL, step_loop, NULL)) abort();
    atexit(shut_down);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server.cfg.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        /* interrupted (libFuzzer's timer signal): the connection completes
         * on its own */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int so_err = errno;
        socklen_t len = sizeof so_err;
        if (errno != EINTR || poll(&p, 1, 10000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len) ||
            so_err) {
            fprintf(stderr, "fuzz_http: connect: %s\n", strerror(so_err));
            abort();
        }
    }
    for (size_t off = 0; off < size;) {
        const ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* the server may answer and close before reading everything */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[16384];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0 || (n < 0 && errno == EINTR)) {
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        /* the server kept the connection open for 10 s after the request ended */
        fprintf(stderr, "fuzz_http: no end of the answer after 10 s\n");
        abort();
    }
    close(fd);
    /* The connection's request ends (on_completed frees it) on the server's
     * thread after the close: wait for it, so that the next input starts
     * from an idle server and libFuzzer's leak check sees no request in
     * flight. */
    for (int i = 0; atomic_load(&server.active) > 0; i++) {
        if (i == 10000) {
            fprintf(stderr, "fuzz_http: a request did not end 10 s after its connection closed\n");
            abort();
        }
        usleep(1000);
    }
    return 0;
}
