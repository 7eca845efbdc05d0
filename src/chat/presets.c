/* Built-in chat templates for models whose file carries none, chosen from
 * the vocabulary's control tokens (include/tokamak.h, "Chat presets").
 *
 * Each preset is a Jinja template written from the format's documented
 * structure: how a turn opens and closes, where the system prompt goes,
 * what the generation prompt is.  The table is ordered from the most to the
 * least specific vocabulary: a Llama 3 vocabulary also holds tokens a looser
 * test would match. */
#include <string.h>

#include <tokamak.h>

typedef struct preset {
    const char *name;
    const char *needs[3];    /* tokens the vocabulary must hold (NULL-terminated) */
    const char *end_of_turn; /* the token closing an assistant turn; NULL: EOS, and the vocabulary's
                                BOS/EOS must then be <s> and </s> */
    bool spm;                /* a SentencePiece vocabulary only */
    const char *source;
} preset;

/* Gemma: "user" and "model" turns; no system role, so a system message
 * opens the first user turn, followed by a blank line. */
static const char GEMMA[] =
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] | trim + '\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' }}"
    "{{ (prefix if loop.first else '') + m['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

/* Llama 3: a header per turn, a blank line, the content, <|eot_id|>. */
static const char LLAMA3[] =
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/* ChatML: <|im_start|>role, newline, content, <|im_end|>, newline. */
static const char CHATML[] =
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* Phi-3: <|role|>, newline, content, <|end|>, newline. */
static const char PHI3[] =
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

/* Mistral (vocabularies with [INST] control tokens): BOS once, each user
 * turn in [INST] ... [/INST], each answer closed by EOS; the system prompt
 * opens the first user turn. */
static const char MISTRAL[] =
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% if m['role'] == 'user' %}{{ '[INST] ' + (prefix if loop.first else '') + m['content'] + '[/INST]' }}"
    "{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + eos_token }}"
    "{% else %}{{ raise_exception('this chat format has user and assistant turns (and a leading system message), not ' + m['role']) }}"
    "{% endif %}"
    "{% endfor %}";

/* Llama 2: each exchange is BOS [INST] user [/INST] answer EOS; the system
 * prompt sits in <<SYS>> ... <</SYS>> at the start of the first user turn. */
static const char LLAMA2[] =
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + (prefix if loop.first else '') + m['content'] | trim + ' [/INST]' }}"
    "{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] | trim + ' ' + eos_token }}"
    "{% else %}{{ raise_exception('this chat format has user and assistant turns (and a leading system message), not ' + m['role']) }}"
    "{% endif %}"
    "{% endfor %}";

static const preset presets[] = {
    {"gemma", {"<start_of_turn>", "<end_of_turn>"}, "<end_of_turn>", false, GEMMA},
    {"llama3", {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "<|eot_id|>", false, LLAMA3},
    {"chatml", {"<|im_start|>", "<|im_end|>"}, "<|im_end|>", false, CHATML},
    {"phi3", {"<|user|>", "<|assistant|>", "<|end|>"}, "<|end|>", false, PHI3},
    {"mistral", {"[INST]", "[/INST]"}, NULL, false, MISTRAL},
    /* Llama 2 writes its markers as text: its vocabulary is SentencePiece
     * with <s>/</s> and spells "[INST]" as "▁[" "INST" "]" (checked below). */
    {"llama2", {"INST", "\xe2\x96\x81["}, NULL, true, LLAMA2},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const preset *find(const char *name) {
    for (size_t i = 0; name && i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

static bool piece_is(const tk_tokenizer *t, int id, const char *piece) {
    return id >= 0 && !strcmp(tk_tokenizer_piece(t, id), piece);
}

const char *tk_chat_preset_detect(const tk_tokenizer *t) {
    if (!t) return NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const preset *p = &presets[i];
        bool all = true;
        for (int k = 0; all && k < 3 && p->needs[k]; k++) all = tk_tokenizer_find(t, p->needs[k]) >= 0;
        if (all && !p->end_of_turn)
            all = piece_is(t, tk_tokenizer_bos(t), "<s>") && piece_is(t, tk_tokenizer_eos(t), "</s>");
        if (all && p->spm) all = tk_tokenizer_kind(t) == TK_TOK_SPM;
        if (all) return p->name;
    }
    return NULL;
}

const char *tk_chat_preset_source(const char *name) {
    const preset *p = find(name);
    return p ? p->source : NULL;
}

const char *tk_chat_preset_end_of_turn(const char *name) {
    const preset *p = find(name);
    return p ? p->end_of_turn : NULL;
}

const char *tk_chat_preset_name(int i) { return i >= 0 && (size_t)i < N_PRESETS ? presets[i].name : NULL; }
