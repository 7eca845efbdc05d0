"""Dense model families against Hugging Face transformers.

Each case builds a tiny random model with transformers (several layers, GQA,
the family's biases / norms / RoPE scaling), saves it with save_pretrained,
and checks that tokamak's logits -- from the directory and from the GGUF
`tokamak convert` writes -- match transformers' float32 forward at every
position, and that a 32-token greedy continuation is the same (checked by
teacher forcing: tokamak's argmax at every position of transformers' greedy
sequence must be transformers' next token).
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

try:
    import torch
    import transformers
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"torch/transformers not importable ({e}); install with tools/oracles.sh --transformers",
                allow_module_level=True)

VOCAB = 32000  # the shared code-draft tokenizer's vocabulary
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, torch_dtype="float32")

PHI3 = dict(tie_word_embeddings=False, sliding_window=None, pad_token_id=0, bos_token_id=1, eos_token_id=2)
PHI_ORIG = 40


def longrope(n):
    return dict(original_max_position_embeddings=PHI_ORIG,
                rope_scaling=dict(type="longrope", short_factor=[1.0 + 0.07 * i for i in range(n)],
                                  long_factor=[1.0 + 2.3 * i for i in range(n)]))


LONGROPE = longrope(8)  # head_dim 16: 8 frequencies

CASES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32, tie_word_embeddings=False)),
    # llama3 scaling: original context 32 with theta 500 puts the low/high
    # frequency wavelength thresholds (32/1, 32/4) inside head_dim 16's range
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM",
                    dict(tie_word_embeddings=True, rope_theta=500.0,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=32))),
    # Phi-3 without longrope and with full rotary: fused qkv_proj / gate_up_proj
    # (kept fused, llama.cpp's attn_qkv / ffn_up; converted to a GGUF phi3)
    "phi3": ("Phi3Config", "Phi3ForCausalLM", PHI3),
    # Phi-3.5-mini-like: longrope with an original context of 40 (PROMPTS
    # give sequences of 35 and 40 tokens, short factors, and of 73, long);
    # attention factor sqrt(1 + ln(256/40) / ln 40) = 1.23
    "phi3.5-longrope": ("Phi3Config", "Phi3ForCausalLM", dict(PHI3, **LONGROPE)),
    # Phi-4-mini-like: the same plus partial rotary (12 of head_dim 16 rotated)
    "phi4-mini": ("Phi3Config", "Phi3ForCausalLM", dict(PHI3, partial_rotary_factor=0.75, **longrope(6))),
    "llama-linear": ("LlamaConfig", "LlamaForCausalLM",
                     dict(tie_word_embeddings=False, rope_scaling=dict(rope_type="linear", factor=2.5))),
    # yarn: theta 100, original context 64 and beta_fast 4 put the ramp at
    # dimensions 1..5 of head_dim 16's 8 frequencies (0 kept, 6-7 divided by
    # the factor); factor 4 gives attention factor 1.139
    "qwen2-yarn": ("Qwen2Config", "Qwen2ForCausalLM",
                   dict(tie_word_embeddings=False, rope_theta=100.0,
                        rope_scaling=dict(rope_type="yarn", factor=4.0, beta_fast=4.0,
                                          original_max_position_embeddings=64))),
}

PROMPTS = [[1, 822, 29871], [1] + list(range(100, 140)), [1, 5, 17, 2000, 31999, 7, 7, 7]]


def build(tmp_path, shared, case):
    conf_cls, model_cls, extra = CASES[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, conf_cls)(**BASE, **extra)
    model = getattr(transformers, model_cls)(cfg).float().eval()
    with torch.no_grad():  # non-trivial norms and biases (random init leaves them 1 / 0)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
    d = tmp_path / case
    model.save_pretrained(d, safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(shared, "models/code-draft", f), d / f)
    return model, d


def tk_logits(tokamak_bin, path, tokens, out):
    # the context is the sequence: LongRoPE's factor set then follows the sequence length, as in transformers
    res = subprocess.run([tokamak_bin, "logits", "-m", str(path), "--tokens", ",".join(map(str, tokens)),
                          "--kv-type", "f32", "-c", str(len(tokens)), "-o", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(tokens), VOCAB)


@pytest.mark.parametrize("case", list(CASES))
def test_family_matches_transformers(tokamak_bin, shared, tmp_path, case):
    model, d = build(tmp_path, shared, case)
    gguf_path = tmp_path / f"{case}.gguf"
    res = subprocess.run([tokamak_bin, "convert", str(d), str(gguf_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for i, prompt in enumerate(PROMPTS):
        with torch.no_grad():
            gen = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                                 pad_token_id=0)[0].tolist()
            ref = model(torch.tensor([gen])).logits[0].numpy()
        scale = float(ref.max() - ref.min())
        for path in [d, gguf_path]:
            got = tk_logits(tokamak_bin, path, gen, tmp_path / f"l{i}.bin")
            err = np.abs(got - ref).max() / scale
            assert err < 1e-4, f"{case} {path.name} prompt {i}: max error {err:.2e} of the logit range"
            # greedy: tokamak picks transformers' next token at every generated step
            picks = got[len(prompt) - 1:-1].argmax(axis=1)
            assert picks.tolist() == gen[len(prompt):], f"{case} {path.name} prompt {i}: greedy differs"


@pytest.mark.parametrize("case", ["phi3.5-longrope", "phi4-mini"])
def test_longrope_switches_at_the_original_context(tokamak_bin, shared, tmp_path, case):
    # transformers picks the factor set by the sequence length: PHI_ORIG tokens rotate with the short
    # factors, PHI_ORIG + 1 with the long ones at every position.  tokamak picks it by its context (llama.cpp's
    # rule): a context of the sequence's length must give transformers' logits on both sides of the switch.
    model, d = build(tmp_path, shared, case)
    seq = [1] + [(i * 7919) % VOCAB for i in range(1, PHI_ORIG + 1)]
    rows = {}
    for n in [PHI_ORIG, PHI_ORIG + 1]:
        with torch.no_grad():
            ref = model(torch.tensor([seq[:n]])).logits[0].numpy()
        got = tk_logits(tokamak_bin, d, seq[:n], tmp_path / "l.bin")
        err = np.abs(got - ref).max() / float(ref.max() - ref.min())
        assert err < 1e-4, f"{case} {n} tokens: max error {err:.2e} of the logit range"
        rows[n] = got
    # the switch is real: the shared prefix's logits differ between the two
    assert np.abs(rows[PHI_ORIG] - rows[PHI_ORIG + 1][:PHI_ORIG]).max() > 1e-2


def test_longrope_bad_factors_are_refused(tokamak_bin, shared, tmp_path):
    import json
    _, d = build(tmp_path, shared, "phi3.5-longrope")
    cfg = json.loads((d / "config.json").read_text())
    rp = cfg.get("rope_parameters") or cfg["rope_scaling"]
    rp["long_factor"] = rp["long_factor"][:-1]  # one short of head_dim / 2
    (d / "config.json").write_text(json.dumps(cfg))
    err = load_error(tokamak_bin, d)
    assert "long_factor" in err and "8" in err
    rp["long_factor"] = [1.0] * 7 + [-2.0]
    (d / "config.json").write_text(json.dumps(cfg))
    assert "long_factor" in load_error(tokamak_bin, d)


def edit_config(d, **changes):
    import json
    p = d / "config.json"
    cfg = json.loads(p.read_text())
    cfg.update(changes)
    p.write_text(json.dumps(cfg))


def load_error(tokamak_bin, path):
    res = subprocess.run([tokamak_bin, "logits", "-m", str(path), "--tokens", "1"], capture_output=True, text=True)
    assert res.returncode != 0
    return res.stderr


def test_bad_configs_are_refused_naming_the_field(tokamak_bin, shared, tmp_path):
    _, d = build(tmp_path, shared, "qwen2")
    edit_config(d, model_type="qwen9", architectures=["Qwen9ForCausalLM"])
    err = load_error(tokamak_bin, d)
    assert "qwen9" in err and "qwen2" in err and "llama" in err  # names the supported ones
    edit_config(d, model_type="qwen2", rope_parameters={"rope_theta": 1e4, "rope_type": "dynamic"})
    err = load_error(tokamak_bin, d)
    assert "rope_parameters" in err and "dynamic" in err
    edit_config(d, rope_parameters={"rope_type": "default"}, rope_theta=None)
    assert "rope_theta" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "llama3", "factor": 8.0})
    assert "low_freq_factor" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 64, "mscale": 0.7})
    assert "mscale" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0})
    assert "original_max_position_embeddings" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "default", "partial_rotary_factor": 0.75})
    assert "partial_rotary_factor" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "longrope", "short_factor": [1.0] * 8})
    assert "longrope" in load_error(tokamak_bin, d)
    edit_config(d, rope_parameters={"rope_theta": 1e4, "rope_type": "default"}, use_sliding_window=True)
    assert "use_sliding_window" in load_error(tokamak_bin, d)


def test_bias_of_an_architecture_without_biases_is_refused(tokamak_bin, shared, tmp_path):
    # a Qwen2 checkpoint relabelled as Llama: its q/k/v biases must not be dropped silently
    _, d = build(tmp_path, shared, "qwen2")
    edit_config(d, model_type="llama", architectures=["LlamaForCausalLM"])
    err = load_error(tokamak_bin, d)
    assert "_proj.bias" in err and "architecture llama" in err


def patch_gguf_dim(src, dst, tensor, dim, value):
    """Copies a GGUF with one dimension of one tensor's header entry changed."""
    import struct
    data = bytearray(src.read_bytes())
    name = tensor.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (ndim,) = struct.unpack_from("<I", data, at)
    assert dim < ndim
    struct.pack_into("<Q", data, at + 4 + 8 * dim, value)
    dst.write_bytes(bytes(data))


@pytest.mark.parametrize("tensor,dim,value", [
    ("rope_factors_long.weight", 0, 7),  # one factor short of head_dim / 2
    ("blk.1.attn_qkv.weight", 1, 96),     # fused q/k/v rows that do not add up to q + 2 kv
    ("blk.0.ffn_up.weight", 1, 128),      # gate|up rows: one ffn_dim, not two
])
def test_phi3_gguf_bad_shapes_are_refused_naming_the_tensor(tokamak_bin, shared, tmp_path, tensor, dim, value):
    _, d = build(tmp_path, shared, "phi3.5-longrope")
    good = tmp_path / "good.gguf"
    assert subprocess.run([tokamak_bin, "convert", str(d), str(good)], capture_output=True).returncode == 0
    bad = tmp_path / "bad.gguf"
    patch_gguf_dim(good, bad, tensor, dim, value)
    err = load_error(tokamak_bin, bad)
    assert tensor in err and "shape" in err, err
