"""The GGUFs `tokamak convert` writes for each family, read by llama.cpp
(llama-cpp-python): a tiny random model per family built with transformers
(the builders of test_families.py and test_moe.py) is converted to a float32
GGUF, and llama.cpp's logits at every position of a 50-token sequence must
match tokamak's on the same file within 1e-4 of the logit range, with the
same argmax.  This checks that the tensor names, layouts and metadata keys
are the ones llama.cpp reads (qwen2, qwen3, phi3 with fused attn_qkv /
ffn_up, LongRoPE factor tensors and partial rotary, qwen2moe, qwen3moe,
olmoe, Mixtral as llama), not only that tokamak reads back what it wrote.

Notes on llama.cpp's side: it picks LongRoPE's long factors when its
context exceeds the original one (here 50 > 40: long), as tokamak does; it
sets special-token attributes by looking up Phi-3's tokens when the model's
general.name contains "phi3", which the shared test tokenizer lacks, so the
directories get neutral names; its olmoe wants attn_k_norm of the full
width, so the OLMoE model here has as many KV heads as heads (OLMoE-1B-7B
has no GQA either).
"""
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")
pytest.importorskip("torch", reason="torch not installed (builds the models)")
pytest.importorskip("transformers", reason="transformers not installed (builds the models)")

import test_families  # noqa: E402
import test_moe  # noqa: E402
from test_gemma import llama_cpp  # noqa: E402,F401  (the llama-cpp-python fixture)

TOKENS = [1] + [(i * 7919) % test_families.VOCAB for i in range(1, 50)]
DENSE = ["qwen2", "qwen2-tied", "qwen3", "phi3", "phi3.5-longrope", "phi4-mini"]
MOE = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"]


def hf_dir(tmp_path, shared, case):
    if case in DENSE:
        _, d = test_families.build(tmp_path, shared, case)
    else:
        model = test_moe.build(case, **({"num_key_value_heads": 4} if case == "olmoe" else {}))
        d = test_moe.save(model, tmp_path, shared)
    neutral = tmp_path / "tiny-model"  # general.name: see the module notes
    shutil.move(str(d), neutral)
    return neutral


@pytest.mark.parametrize("case", DENSE + MOE)
def test_converted_gguf_matches_llama_cpp(tokamak_bin, shared, tmp_path, llama_cpp, case):
    d = hf_dir(tmp_path, shared, case)
    gguf = tmp_path / "m.gguf"
    res = subprocess.run([tokamak_bin, "convert", str(d), str(gguf)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = test_families.tk_logits(tokamak_bin, gguf, TOKENS, tmp_path / "l.bin")
    llm = llama_cpp.Llama(model_path=str(gguf), logits_all=True, n_ctx=len(TOKENS), n_batch=512, n_threads=1,
                          n_threads_batch=2, verbose=False, type_k=0, type_v=0)  # float32 KV, as tokamak's here
    try:
        llm.eval(TOKENS)
        want = np.array(llm.scores[:len(TOKENS)], dtype=np.float32)
    finally:
        llm.close()
    for t in range(len(TOKENS)):
        rng = float(want[t].max() - want[t].min())
        err = float(np.abs(got[t] - want[t]).max())
        assert err <= 1e-4 * rng, f"{case} position {t}: max |diff| {err} (range {rng})"
    assert (got.argmax(axis=1) == want.argmax(axis=1)).all(), f"{case}: argmax differs from llama.cpp's"
