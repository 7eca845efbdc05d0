"""Token-mask differential: tokamak's allowed-token set (build/grammar_mask, the
test hook over src/grammar) equals llguidance's at every step along sampled
token paths, for regex grammars, on a Llama-2 SPM and a Llama-3 byte-level BPE
tokenizer from ../shared.

Where the grammar forces the next bytes (llguidance's compute_ff_bytes is not
empty), llguidance allows only the canonical tokenization of them (e.g. "s",
not the byte token <0x73>), a choice of its own beyond the grammar; there its
set must be a subset of tokamak's, every token of which must spell a prefix of
the forced bytes or extend them.  Elsewhere the sets are equal."""
import os
import random
import subprocess

import pytest

from conftest import REPO, SHARED

llguidance = pytest.importorskip("llguidance", reason="llguidance (the reference grammar engine) is not installed")
from llguidance.gbnf_to_lark import gbnf_to_lark  # noqa: E402

TOOL = os.environ.get("TK_GRAMMAR_MASK_BIN") or os.path.join(REPO, "build", "grammar_mask")
TOKENIZERS = ["tokenizers/llama2/tokenizer.json", "tokenizers/llama3/tokenizer.json"]
# explicit ASCII classes: engines differ on what \w or . mean beyond ASCII
REGEXES = [
    r"[0-9]{1,3}(\.[0-9]{2})?",
    r"(yes|no|maybe)",
    r"[a-z ]{1,12}!",
    r'\{"id": [1-9][0-9]{0,4}, "ok": (true|false)\}',
    r"(ab|cd)+e?",
]
# GBNF grammars, given to llguidance through its own gbnf_to_lark converter
GBNFS = [
    'root ::= "{" ws ( pair ( "," ws pair )* )? "}"\n'
    'pair ::= "\\"" [a-z]+ "\\"" ws ":" ws ( [0-9]+ | "true" | "null" ) ws\n'
    'ws ::= [ \\t\\n]{0,3}',
    # literal UTF-8 in the class: gbnf_to_lark turns the escape \u00e0 into an invalid \ue0
    'root ::= item{1,3} "."\nitem ::= [A-Z] [a-z\u00e0-\u00ff]* " "?',
]
CASES = [("regex", r, lambda src: llguidance.LLMatcher.grammar_from_regex(src)) for r in REGEXES] + \
        [("gbnf", g, lambda src: gbnf_to_lark(src)) for g in GBNFS]


def bits(mask: bytes, n: int):
    return {i for i in range(n) if (mask[i >> 3] >> (i & 7)) & 1}


def tokamak_masks(tok_path, kind, src, path):
    """(end-of-generation ids, the mask at each step)"""
    out = subprocess.run([TOOL, tok_path, kind, src] + [str(t) for t in path],
                         capture_output=True, text=True, timeout=600, check=True).stdout.splitlines()
    assert out[0].startswith("eog")
    return [int(x) for x in out[0].split()[1:]], [set(map(int, line.split())) for line in out[1:]]


@pytest.mark.parametrize("tok_rel", TOKENIZERS)
def test_masks_equal_llguidance(tok_rel):
    if not os.path.exists(TOOL):
        pytest.skip(f"{TOOL} not built (cmake --build build --target grammar_mask)")
    tok_path = os.path.join(SHARED, tok_rel)
    if not os.path.exists(tok_path):
        pytest.skip(f"{tok_path} not found")
    eog, _ = tokamak_masks(tok_path, "regex", "x", [])
    # the same end-of-generation tokens on both sides (tokamak takes EOT ones from the config too)
    lt = llguidance.LLTokenizer(tok_path, eos_token=eog)
    rng = random.Random(17)
    for kind, regex, to_llg in CASES:
        for _ in range(2):
            m = llguidance.LLMatcher(lt, to_llg(regex), log_level=0)
            assert not m.is_error(), m.get_error()
            ref, forced, path = [], [], []
            while True:
                allowed = bits(m.compute_bitmask(), lt.vocab_size)
                ref.append(allowed)
                forced.append(m.compute_ff_bytes())
                choices = sorted(allowed - set(lt.eos_tokens))
                if not choices or len(path) >= 40:
                    break
                t = rng.choice(choices)
                path.append(t)
                assert m.consume_token(t), m.get_error()
            _, ours = tokamak_masks(tok_path, kind, regex, path)
            assert len(ours) == len(ref), f"{regex}: tokamak stopped early: {ours[-1] if ours else ''}"
            for step, (a, b) in enumerate(zip(ours, ref)):
                ff = forced[step]
                if ff and b <= a:
                    for i in a - b:
                        tb = lt.decode_bytes([i])
                        assert ff.startswith(tb) or tb.startswith(ff), f"{regex!r} step {step}: token {i} {tb!r} vs forced {ff!r}"
                    continue
                if a != b:
                    only_t, only_l = sorted(a - b)[:5], sorted(b - a)[:5]
                    pytest.fail(f"{tok_rel} {regex!r} step {step} after {lt.decode_bytes(path[:step])!r}: "
                                f"only tokamak {only_t} {[lt.decode_bytes([i]) for i in only_t]}, "
                                f"only llguidance {only_l} {[lt.decode_bytes([i]) for i in only_l]}")
