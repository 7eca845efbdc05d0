#include <stdio.h>
#include <string.h>

#include "commands.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"run", tk_cmd_run, "generate text from a prompt"},
    {"chat", tk_cmd_chat, "chat with a model in the terminal (multi-turn, its chat template)"},
    {"info", tk_cmd_info, "show a model's architecture, tensors and sizes"},
    {"tokenize", tk_cmd_tokenize, "print the token ids / pieces of a text"},
    {"logits", tk_cmd_logits, "print every position's logits for a token sequence"},
    {"bench", tk_cmd_bench, "measure prefill, decode and batched decode speed"},
    {"synth", tk_cmd_synth, "write a GGUF with a real model's shapes and random weights"},
    {"convert", tk_cmd_convert, "convert a llama2.c or Hugging Face model to GGUF"},
    {"serve", tk_cmd_serve, "run an OpenAI-compatible HTTP server"},
    {"router", tk_cmd_router, "route OpenAI requests over serve replicas by prompt-prefix affinity"},
    {"loadtest", tk_cmd_loadtest, "benchmark an OpenAI-compatible server (streaming completions)"},
    {"quantize", tk_cmd_quantize, "quantize a model to a GGUF (round to nearest, GPTQ, AWQ, NF4)"},
    {"perplexity", tk_cmd_perplexity, "perplexity and KL divergence of a model on a text"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nRun 'tokamak COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tokamak: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
