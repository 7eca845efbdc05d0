"""Mixture-of-experts models against Hugging Face transformers (torch, CPU):
a tiny random Mixtral saved with save_pretrained is loaded by tokamak as an
HF directory (per-expert tensors stacked at load) and as the GGUF
`tokamak convert` writes from it.  Logits at every position of several
prompts must agree with transformers' within 1e-4 of the logit range, and
32 greedy tokens must be the same (tokamak's argmax at every position of
transformers' greedy continuation is the token transformers chose)."""
import os
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")
torch = pytest.importorskip("torch", reason="torch not installed (the oracle for MoE logits)")
transformers = pytest.importorskip("transformers", reason="transformers not installed (the oracle for MoE logits)")

VOCAB = 32000  # the shared llama2 tokenizer's vocabulary
PROMPTS = [[1, 15043, 29892, 3186], [1] + [(i * 7919) % VOCAB for i in range(1, 40)], [1, 450, 4996, 17354, 1701]]


def mixtral(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=6,
                                     num_experts_per_tok=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                                     rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None)
    model = transformers.MixtralForCausalLM(cfg).eval()
    with torch.no_grad():  # larger router weights: routes that differ token to token
        for layer in model.model.layers:
            moe = getattr(layer, "block_sparse_moe", None) or layer.mlp
            moe.gate.weight.normal_(0, 0.5)
    return model


def save(model, tmp_path, shared):
    d = tmp_path / "hf"
    model.save_pretrained(d, safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(shared, "tokenizers/llama2", f), d / f)
    return d


def tk_logits(bin_, model, ids, tmp_path):
    out = tmp_path / "logits.f32"
    subprocess.run([bin_, "logits", "-m", str(model), "--tokens", ",".join(map(str, ids)), "-o", str(out),
                    "--kv-type", "f32", "-t", "2"], check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def hf_greedy(model, ids, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    return out[0].tolist()


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
def test_mixtral_matches_transformers(tokamak_bin, shared, tmp_path, fmt):
    model = mixtral(tmp_path)
    path = save(model, tmp_path, shared)
    if fmt == "gguf":
        gg = tmp_path / "m.gguf"
        subprocess.run([tokamak_bin, "convert", str(path), str(gg)], check=True, capture_output=True)
        path = gg
    for ids in PROMPTS:
        want, got = hf_logits(model, ids), tk_logits(tokamak_bin, path, ids, tmp_path)
        assert got.shape == want.shape
        for t in range(len(ids)):
            rng = float(want[t].max() - want[t].min())
            err = float(np.abs(got[t] - want[t]).max())
            assert err <= 1e-4 * rng, f"{fmt} prompt {ids[:4]} position {t}: max |diff| {err} (range {rng})"
    seq = hf_greedy(model, PROMPTS[0], 32)
    assert len(seq) == len(PROMPTS[0]) + 32
    got = tk_logits(tokamak_bin, path, seq[:-1], tmp_path).argmax(axis=1)
    n0 = len(PROMPTS[0])
    assert got[n0 - 1:].tolist() == seq[n0:], f"{fmt}: greedy continuation differs"


def test_bad_expert_config_refused(tokamak_bin, shared, tmp_path):
    """More experts per token than experts, and an expert count the tensors do not have, are refused
    naming the problem."""
    import json
    model = mixtral(tmp_path)
    path = save(model, tmp_path, shared)
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["num_experts_per_tok"] = cfg["num_local_experts"] + 1
    cfg_path.write_text(json.dumps(cfg))
    r = subprocess.run([tokamak_bin, "logits", "-m", str(path), "--tokens", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0 and "expert_used_count" in r.stderr, r.stderr
    cfg["num_experts_per_tok"] = 2
    cfg["num_local_experts"] = 7  # the files hold 6
    cfg_path.write_text(json.dumps(cfg))
    r = subprocess.run([tokamak_bin, "logits", "-m", str(path), "--tokens", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0 and "block_sparse_moe.gate.weight" in r.stderr and "[7, 64]" in r.stderr, r.stderr
