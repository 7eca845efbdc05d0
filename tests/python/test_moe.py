"""Mixture-of-experts models against Hugging Face transformers (torch, CPU):
a tiny random Mixtral, Qwen2-MoE (shared expert and its gate, q/k/v biases),
Qwen3-MoE (per-head q/k norms, norm_topk_prob) and OLMoE (q/k norms over the
whole projection) saved with save_pretrained is loaded by tokamak as an HF
directory (per-expert tensors stacked at load) and as the GGUF `tokamak
convert` writes from it.  Logits at every position of several
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


BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False)
FAMILIES = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_local_experts=6, num_experts_per_tok=2, sliding_window=None)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=40, norm_topk_prob=False)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=32,
                       norm_topk_prob=True)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(num_experts=6, num_experts_per_tok=3, norm_topk_prob=False, pad_token_id=0, eos_token_id=2)),
}


def build(family="mixtral", **overrides):
    conf_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    cfg = getattr(transformers, conf_cls)(**dict(BASE, **extra, **overrides))
    model = getattr(transformers, model_cls)(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):  # non-trivial norms and biases
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith(".gate.weight") or name.endswith("shared_expert_gate.weight"):
                p.normal_(0, 0.5)  # larger router weights: routes that differ token to token
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
@pytest.mark.parametrize("family", list(FAMILIES))
def test_moe_matches_transformers(tokamak_bin, shared, tmp_path, family, fmt):
    model = build(family)
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
            assert err <= 1e-4 * rng, f"{family} {fmt} prompt {ids[:4]} position {t}: max |diff| {err} (range {rng})"
    seq = hf_greedy(model, PROMPTS[0], 32)
    assert len(seq) == len(PROMPTS[0]) + 32
    got = tk_logits(tokamak_bin, path, seq[:-1], tmp_path).argmax(axis=1)
    n0 = len(PROMPTS[0])
    assert got[n0 - 1:].tolist() == seq[n0:], f"{family} {fmt}: greedy continuation differs"


def test_bad_expert_config_refused(tokamak_bin, shared, tmp_path):
    """More experts per token than experts, and an expert count the tensors do not have, are refused
    naming the problem."""
    import json
    model = build("mixtral")
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


@pytest.mark.parametrize("family,change,field", [
    ("qwen3_moe", {"norm_topk_prob": False}, "norm_topk_prob"),  # tokamak's qwen3moe renormalizes (as llama.cpp)
    ("qwen2_moe", {"norm_topk_prob": True}, "norm_topk_prob"),
    ("qwen2_moe", {"mlp_only_layers": [1]}, "mlp_only_layers"),
    ("qwen3_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
])
def test_moe_options_tokamak_lacks_are_refused(tokamak_bin, shared, tmp_path, family, change, field):
    import json
    path = save(build(family), tmp_path, shared)
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(change)
    cfg_path.write_text(json.dumps(cfg))
    r = subprocess.run([tokamak_bin, "logits", "-m", str(path), "--tokens", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0 and field in r.stderr, r.stderr
