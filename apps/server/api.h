/* OpenAI request parsing and error objects.  The body is hostile: every
 * field's JSON type and range is checked, unknown fields are ignored, and
 * anything we cannot honour exactly is rejected rather than silently
 * approximated. */
#ifndef TK_SERVER_API_H
#define TK_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <tokamak.h>

#define TK_API_MAX_BODY (1u << 20)  /* bytes of request body */
#define TK_API_MAX_STOP 4
#define TK_API_MAX_STOP_LEN TK_REQUEST_MAX_STOP_LEN
#define TK_API_MAX_N 16
#define TK_API_MAX_TOP_LOGPROBS TK_REQUEST_MAX_TOP_LOGPROBS
#define TK_API_MAX_MESSAGES 1024
#define TK_API_MAX_TOOLS 128
#define TK_API_MAX_TOOL_CALLS 64        /* in one assistant message */
#define TK_API_MAX_TOOL_NAME 64

typedef enum tk_api_tool_choice {
    TK_TOOL_CHOICE_NONE = 0, TK_TOOL_CHOICE_AUTO, TK_TOOL_CHOICE_REQUIRED, TK_TOOL_CHOICE_NAMED
} tk_api_tool_choice;

typedef enum tk_api_kind { TK_API_COMPLETIONS = 0, TK_API_CHAT = 1 } tk_api_kind;

typedef struct tk_api_error {
    int status;          /* HTTP status */
    const char *type;    /* "invalid_request_error", ... */
    const char *code;    /* NULL: JSON null */
    char param[64];      /* "": JSON null */
    char message[512];
} tk_api_error;

typedef struct tk_api_req {
    tk_api_kind kind;
    json_t *root;               /* owns every string below that points into it */
    /* completions: the prompt as text or as token ids (exactly one) */
    const char *prompt_text;
    size_t prompt_len;
    int32_t *prompt_ids;        /* malloc'd */
    int n_prompt_ids;
    /* chat */
    tk_chat_msg *msgs;          /* malloc'd; role/content point into root or `owned` */
    int n_msgs;
    char **owned;               /* contents joined from content-part arrays */
    int n_owned;
    /* tools: "tools" (checked function definitions; points into root), the
     * choice (no tools: NONE; default AUTO) and the named function */
    json_t *messages;           /* the raw array, for templates that read tool_calls etc. */
    bool messages_have_tools;   /* some message carries tool_calls / tool_call_id */
    json_t *tools;
    tk_api_tool_choice tool_choice;
    const char *tool_name;
    bool parallel_tool_calls;

    int max_tokens;             /* 0: not given */
    int n;
    tk_sampling sampling;
    bool seed_given;
    bool ignore_eos;
    const char *stop[TK_API_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    int logprobs;               /* -1: none; else alternatives per token */
    /* constrained output: response_format json_object / json_schema, or an
     * extension field (regex, grammar, vLLM's guided_*); at most one */
    tk_constraint_kind constraint;
    char *constraint_text;      /* malloc'd: schema (JSON text), regex or GBNF grammar */
    char constraint_param[48];  /* the field it came from, for the compiler's errors */
    /* extension "speculative": {"mode", "draft_max", "draft_min"}; 0: the server's */
    int spec_mode;              /* tk_spec_mode */
    int draft_max, draft_min;
} tk_api_req;

/* Parses a request body.  On failure fills *e (status 400/404) and leaves
 * *out empty (nothing to free). */
int tk_api_parse(tk_api_kind kind, const char *body, size_t len, const char *model_name, int n_vocab,
                 tk_api_req *out, tk_api_error *e);
void tk_api_req_free(tk_api_req *r);
/* Frees the parsed JSON and everything pointing into it (prompt, messages,
 * stop strings), keeping the scalar fields the answer is formatted by. */
void tk_api_req_drop_inputs(tk_api_req *r);

void tk_api_error_set(tk_api_error *e, int status, const char *type, const char *code, const char *param,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string, NULL if out of memory. */
char *tk_api_error_json(const tk_api_error *e);

/* A JSON string from bytes that should be UTF-8; invalid sequences become
 * U+FFFD instead of failing (jansson refuses invalid UTF-8). */
json_t *tk_json_lossy_string(const char *s, size_t n);

#endif
