"""`tokamak convert` checked by an independent GGUF reader (the `gguf`
package from PyPI) and against independent data: the llama2.c export of the
same model, whose Q/K rows llama2.c's own exporter permuted."""
import os
import struct
import subprocess

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed (PyPI unreachable?)")
gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (PyPI unreachable?)")


def read_llama2c(path):
    with open(path, "rb") as f:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("7i", f.read(28))
        data = np.frombuffer(f.read(), dtype=np.float32)
    hd = dim // n_heads
    kv_dim = n_kv * hd
    out, off = {}, 0

    def take(name, shape):
        nonlocal off
        n = int(np.prod(shape))
        out[name] = data[off:off + n].reshape(shape)
        off += n

    take("token_embd", (abs(vocab), dim))
    take("attn_norm", (n_layers, dim))
    take("attn_q", (n_layers, dim, dim))
    take("attn_k", (n_layers, kv_dim, dim))
    take("attn_v", (n_layers, kv_dim, dim))
    take("attn_output", (n_layers, dim, dim))
    take("ffn_norm", (n_layers, dim))
    take("ffn_gate", (n_layers, hidden, dim))
    take("ffn_down", (n_layers, dim, hidden))
    take("ffn_up", (n_layers, hidden, dim))
    take("output_norm", (dim,))
    return out, n_layers


def tensor_f32(t):
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
        [int(x) for x in reversed(t.shape)])


@pytest.mark.parametrize("src", ["models/code-target", "models/aidreams260K.bin"])
def test_convert_f32_matches_independent_data(tokamak_bin, shared, tmp_path, src):
    out = tmp_path / "model.gguf"
    cmd = [tokamak_bin, "convert", os.path.join(shared, src), str(out)]
    if src.endswith(".bin"):
        cmd += ["--tokenizer", os.path.join(shared, "models/aidreams260K.tok512.bin")]
    subprocess.run(cmd, check=True, capture_output=True)
    r = gguf.GGUFReader(str(out))
    fields = {k: v for k, v in r.fields.items()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    tokens = fields["tokenizer.ggml.tokens"]
    assert bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() == "llama"

    ref_path = "models/code-target.llama2c.bin" if "code-target" in src else "models/aidreams260K.bin"
    ref, n_layers = read_llama2c(os.path.join(shared, ref_path))
    assert len(tokens.data) == ref["token_embd"].shape[0]
    by_name = {t.name: t for t in r.tensors}
    np.testing.assert_array_equal(tensor_f32(by_name["token_embd.weight"]), ref["token_embd"])
    np.testing.assert_array_equal(tensor_f32(by_name["output_norm.weight"]), ref["output_norm"])
    for layer in range(n_layers):
        for kind in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_down", "ffn_up"]:
            got = tensor_f32(by_name[f"blk.{layer}.{kind}.weight"])
            np.testing.assert_array_equal(got, ref[kind][layer], err_msg=f"blk.{layer}.{kind}")


def test_convert_q8_0_and_f16_are_readable(tokamak_bin, shared, tmp_path):
    for typ, gtype in [("q8_0", gguf.GGMLQuantizationType.Q8_0), ("f16", gguf.GGMLQuantizationType.F16),
                       ("bf16", gguf.GGMLQuantizationType.BF16)]:
        out = tmp_path / f"m-{typ}.gguf"
        subprocess.run([tokamak_bin, "convert", os.path.join(shared, "models/code-draft"), str(out), "--type", typ],
                       check=True, capture_output=True)
        r = gguf.GGUFReader(str(out))
        by_name = {t.name: t for t in r.tensors}
        assert by_name["blk.0.ffn_up.weight"].tensor_type == gtype
        assert by_name["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
        # tokamak runs what it wrote
        res = subprocess.run([tokamak_bin, "logits", "-m", str(out), "--tokens", "1,822,29871"],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
