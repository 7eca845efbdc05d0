"""`tokamak quantize` on Phi-3 (fused attn_qkv / ffn_up) against llama.cpp's
own quantizer (llama-cpp-python's llama_model_quantize) on the same file.

A tiny random Phi-3 built with transformers (dims that are whole K-quant
blocks of 256, 8 layers so Q4_K_M's more-bits layers are a real subset; with
LongRoPE, so its factor tensors ride along) is converted to a float32 GGUF;
both quantizers write q8_0, q4_0 and q4_k_m from it, and every tensor must
have the same type and the same bytes (tokamak's round-to-nearest
quantizers are llama.cpp's reference ones, and its Q4_K_M mix counts
attn_qkv as llama.cpp counts it, an attn_v-like tensor).  The quantized file
then runs (logits close to the float file's, greedy mostly the same), and
the calibrated methods are refused with a message naming the fused tensors.
"""
import os
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")
gguf = pytest.importorskip("gguf", reason="gguf (the tensor reader) not installed")
pytest.importorskip("torch", reason="torch not installed (builds the model)")
pytest.importorskip("transformers", reason="transformers not installed (builds the model)")

import torch  # noqa: E402
import transformers  # noqa: E402

import test_families  # noqa: E402
from test_gemma import llama_cpp  # noqa: E402,F401  (the llama-cpp-python fixture)

FTYPES = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15}  # llama_ftype
TOKENS = [1] + [(i * 7919) % test_families.VOCAB for i in range(1, 48)]


@pytest.fixture(scope="module")
def phi3_f32(tmp_path_factory, tokamak_bin, shared):
    tmp = tmp_path_factory.mktemp("phi3q")
    torch.manual_seed(0)
    cfg = transformers.Phi3Config(vocab_size=test_families.VOCAB, hidden_size=256, intermediate_size=512,
                                  num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=256, rms_norm_eps=1e-6, torch_dtype="float32",
                                  **test_families.PHI3, **test_families.longrope(32))
    model = transformers.Phi3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    d = tmp / "tiny-model"  # a neutral general.name: see test_llamacpp_families.py
    model.save_pretrained(d, safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(shared, "models/code-draft", f), d / f)
    out = tmp / "phi3-f32.gguf"
    res = subprocess.run([tokamak_bin, "convert", str(d), str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


def tensors(path):
    r = gguf.GGUFReader(str(path))
    return {t.name: (t.tensor_type.name, bytes(t.data.tobytes())) for t in r.tensors}


@pytest.mark.parametrize("qtype", list(FTYPES))
def test_phi3_quantize_matches_llama_cpp(tokamak_bin, llama_cpp, phi3_f32, tmp_path, qtype):
    ours, theirs = tmp_path / f"tk-{qtype}.gguf", tmp_path / f"ll-{qtype}.gguf"
    res = subprocess.run([tokamak_bin, "quantize", str(phi3_f32), str(ours), "--type", qtype, "-t", "2", "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPES[qtype]
    p.nthread = 2
    assert llama_cpp.llama_model_quantize(str(phi3_f32).encode(), str(theirs).encode(), p) == 0
    a, b = tensors(ours), tensors(theirs)
    assert sorted(a) == sorted(b)
    for name in sorted(a):
        assert a[name][0] == b[name][0], f"{qtype} {name}: tokamak {a[name][0]}, llama.cpp {b[name][0]}"
        assert a[name][1] == b[name][1], f"{qtype} {name} ({a[name][0]}): bytes differ from llama.cpp's"
    if qtype == "q4_k_m":  # the mix is exercised: fused tensors at more than one type
        qkv = {a[f"blk.{l}.attn_qkv.weight"][0] for l in range(8)}
        assert qkv == {"Q4_K", "Q6_K"}, qkv
        assert a["blk.0.ffn_up.weight"][0] == "Q4_K"


def test_phi3_quantized_runs(tokamak_bin, phi3_f32, tmp_path):
    q8 = tmp_path / "q8.gguf"
    res = subprocess.run([tokamak_bin, "quantize", str(phi3_f32), str(q8), "--type", "q8_0", "-t", "2", "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    f = test_families.tk_logits(tokamak_bin, phi3_f32, TOKENS, tmp_path / "f.bin")
    g = test_families.tk_logits(tokamak_bin, q8, TOKENS, tmp_path / "g.bin")
    rng = float(f.max() - f.min())
    assert np.abs(f - g).max() < 2e-2 * rng
    assert (f.argmax(axis=1) == g.argmax(axis=1)).mean() >= 0.9


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_phi3_calibrated_methods_refused(tokamak_bin, phi3_f32, tmp_path, shared, method):
    res = subprocess.run([tokamak_bin, "quantize", str(phi3_f32), str(tmp_path / "x.gguf"), "--type", "q4_0",
                          "--method", method, "--calib", os.path.join(shared, "models/code-calib.txt")],
                         capture_output=True, text=True)
    assert res.returncode != 0
    assert "fused attn_qkv" in res.stderr, res.stderr
    assert not (tmp_path / "x.gguf").exists()
