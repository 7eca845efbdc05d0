/* tokamak run: generate text from a prompt, streaming it to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "../util/mapfile.h"
#include "args.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak run -m MODEL [-p PROMPT | -f FILE] [options]\n"
            "  -m, --model PATH      .gguf, llama2.c .bin, or Hugging Face directory\n"
            "  --tokenizer PATH      tokenizer.bin / tokenizer.json (needed for llama2.c models)\n"
            "  -p, --prompt TEXT     prompt text\n"
            "  -f, --file PATH       read the prompt from a file\n"
            "  -n, --n-predict N     tokens to generate (default 128; -1: until EOS/context)\n"
            "  --temp T              temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K             (default 40; 0 = off)\n"
            "  --top-p P             (default 0.95; 1 = off)\n"
            "  --min-p P             (default 0.05; 0 = off)\n"
            "  --repeat-penalty R    (default 1 = off)   --repeat-last-n N (default 64)\n"
            "  --presence-penalty X  --frequency-penalty X   (default 0)\n"
            "  --seed S              RNG seed (same seed, same output)\n"
            "  -c, --ctx-size N      context length (default: the model's)\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  --kv-type T           KV cache storage: f16 (default), f32, q8_0\n"
            "  --no-bos              do not prepend BOS\n"
            "  --ignore-eos          keep generating past end-of-generation tokens\n"
            "speculative decoding:\n"
            "%s",
            tk_spec_usage);
}

static int write_text(void *user, const char *text, int len) {
    (void)user;
    fwrite(text, 1, (size_t)len, stdout);
    fflush(stdout);
    return 0;
}

int tk_cmd_run(int argc, char **argv) {
    tk_engine_config cfg = {0};
    tk_gen_params gp = {.max_tokens = 128, .add_bos = true};
    tk_sampling_defaults(&gp.sampling);
    const char *prompt = NULL, *prompt_file = NULL;
    const char *cmd = "run";
    tk_spec_args spec = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = tk_arg_spec(cmd, argc, argv, &i, &spec);
        if (rc) {
            if (rc < 0) return 2;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) rc = tk_arg_str(cmd, argc, argv, &i, &cfg.model_path);
        else if (!strcmp(a, "--tokenizer")) rc = tk_arg_str(cmd, argc, argv, &i, &cfg.tokenizer_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) rc = tk_arg_str(cmd, argc, argv, &i, &prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) rc = tk_arg_str(cmd, argc, argv, &i, &prompt_file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) rc = tk_arg_int(cmd, argc, argv, &i, -1, 1 << 30, &gp.max_tokens);
        else if (!strcmp(a, "--temp")) rc = tk_arg_float(cmd, argc, argv, &i, 0, 100, &gp.sampling.temperature);
        else if (!strcmp(a, "--top-k")) rc = tk_arg_int(cmd, argc, argv, &i, 0, 1 << 30, &gp.sampling.top_k);
        else if (!strcmp(a, "--top-p")) rc = tk_arg_float(cmd, argc, argv, &i, 1e-6, 1, &gp.sampling.top_p);
        else if (!strcmp(a, "--min-p")) rc = tk_arg_float(cmd, argc, argv, &i, 0, 1, &gp.sampling.min_p);
        else if (!strcmp(a, "--repeat-penalty")) rc = tk_arg_float(cmd, argc, argv, &i, 1e-3, 100, &gp.sampling.repeat_penalty);
        else if (!strcmp(a, "--repeat-last-n")) rc = tk_arg_int(cmd, argc, argv, &i, -1, 1 << 30, &gp.sampling.penalty_last_n);
        else if (!strcmp(a, "--presence-penalty")) rc = tk_arg_float(cmd, argc, argv, &i, -2, 2, &gp.sampling.presence_penalty);
        else if (!strcmp(a, "--frequency-penalty")) rc = tk_arg_float(cmd, argc, argv, &i, -2, 2, &gp.sampling.frequency_penalty);
        else if (!strcmp(a, "--seed")) rc = tk_arg_u64(cmd, argc, argv, &i, &gp.sampling.seed);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) rc = tk_arg_int(cmd, argc, argv, &i, 1, 1 << 24, &cfg.ctx_len);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = tk_arg_int(cmd, argc, argv, &i, 1, 1024, &cfg.n_threads);
        else if (!strcmp(a, "--kv-type")) rc = tk_arg_str(cmd, argc, argv, &i, &cfg.kv_type);
        else if (!strcmp(a, "--no-bos")) gp.add_bos = false;
        else if (!strcmp(a, "--ignore-eos")) gp.ignore_eos = true;
        else {
            fprintf(stderr, "tokamak run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (rc) return 2;
    }
    if (!cfg.model_path) {
        fprintf(stderr, "tokamak run: -m MODEL is required\n");
        usage(stderr);
        return 2;
    }
    if (!!prompt == !!prompt_file) {
        fprintf(stderr, "tokamak run: give exactly one of -p PROMPT or -f FILE\n");
        return 2;
    }
    tk_err err;
    char *file_text = NULL;
    if (prompt_file) {
        if (tk_read_file(prompt_file, &file_text, NULL, &err)) {
            fprintf(stderr, "tokamak run: %s\n", err.msg);
            return 1;
        }
        prompt = file_text;
    }
    tk_spec_args_apply(&spec, &cfg);
    cfg.require_tokenizer = true;
    tk_engine *e;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak run: %s\n", err.msg);
        free(file_text);
        return 1;
    }
    tk_gen_stats st;
    int rc = tk_engine_generate(e, prompt, &gp, write_text, NULL, &st, &err);
    printf("\n");
    fflush(stdout);
    if (rc) {
        fprintf(stderr, "tokamak run: %s\n", err.msg);
    } else {
        tk_model_summary ms;
        tk_engine_summary(e, &ms);
        fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.1f tokens/s)\n", st.n_prompt, st.prompt_seconds,
                st.prompt_seconds > 0 ? st.n_prompt / st.prompt_seconds : 0);
        fprintf(stderr, "generation: %d tokens in %.3f s (%.1f tokens/s), stopped by %s\n", st.n_generated,
                st.gen_seconds, st.gen_seconds > 0 ? st.n_generated / st.gen_seconds : 0, st.stop_reason);
        if (st.spec_target_passes > 0) tk_print_spec_stats(stderr, e, st.spec_drafted, st.spec_accepted,
                                                           st.spec_target_passes, st.n_generated);
        fprintf(stderr, "memory: weights %.1f MiB, KV cache %.1f MiB, peak RSS %.1f MiB\n",
                ms.weight_bytes / 1048576.0, ms.kv_bytes / 1048576.0, tk_peak_rss() / 1048576.0);
    }
    tk_engine_close(e);
    free(file_text);
    return rc ? 1 : 0;
}
