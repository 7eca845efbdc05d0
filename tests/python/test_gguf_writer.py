"""Cross-check the C GGUF writer with an independent reader (the `gguf`
Python package from llama.cpp).

test_gguf_hostile writes its round-trip file to $TK_GGUF_ROUNDTRIP_OUT when
that is set; this test runs it and reads the file back.  Set TOKAMAK_BUILD to
the CMake build directory (default: ./build).
"""
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

BUILD = Path(os.environ.get("TOKAMAK_BUILD", Path(__file__).resolve().parents[2] / "build"))
HOSTILE = BUILD / "test_gguf_hostile"


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    if not HOSTILE.exists():
        pytest.skip(f"{HOSTILE} not built")
    out = tmp_path_factory.mktemp("gguf") / "roundtrip.gguf"
    env = dict(os.environ, TK_GGUF_ROUNDTRIP_OUT=str(out))
    subprocess.run([str(HOSTILE)], check=True, env=env, capture_output=True)
    return gguf.GGUFReader(out)


def field(reader, key):
    f = reader.fields[key]
    return f, f.contents()


def test_metadata(reader):
    assert field(reader, "general.architecture")[1] == "llama"
    f, v = field(reader, "t.u32")
    assert f.types == [gguf.GGUFValueType.UINT32] and v == 0xDEADBEEF
    f, v = field(reader, "t.i32")
    assert f.types == [gguf.GGUFValueType.INT32] and v == -123456
    f, v = field(reader, "t.f32")
    assert f.types == [gguf.GGUFValueType.FLOAT32] and np.float32(v) == np.float32(0.1)
    assert field(reader, "t.true")[1] is True or field(reader, "t.true")[1] == 1
    assert not field(reader, "t.false")[1]
    assert field(reader, "t.str")[1] == "h\u00e9llo world"
    assert field(reader, "t.empty")[1] == ""
    assert field(reader, "t.astr")[1] == ["alpha", "", "\u0120t\u00e9", "zzzz"]
    f, v = field(reader, "t.af32")
    assert f.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32]
    assert np.array_equal(np.float32(v), np.float32([1.5, -2.25, 0.0, 3.4028235e38, 1e-45]))
    assert field(reader, "t.ai32")[1] == [-1, 0, 2**31 - 1, -(2**31)]
    assert field(reader, "t.astr0")[1] == []
    # one entry per key: re-setting t.u32 replaced it
    user_keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert len(user_keys) == 13


def test_tensors(reader):
    t = {x.name: x for x in reader.tensors}
    assert list(t) == ["f32", "f16", "bf16", "q8", "q4k", "4d"]
    assert t["f32"].tensor_type == gguf.GGMLQuantizationType.F32
    assert list(t["f32"].shape) == [8, 3]
    expect = np.arange(24, dtype=np.float32) * 0.5 - 3.0
    assert np.array_equal(np.asarray(t["f32"].data).reshape(-1), expect)
    assert t["f16"].tensor_type == gguf.GGMLQuantizationType.F16
    h = np.arange(32, dtype=np.float32) / np.float32(7) - np.float32(1)
    assert np.array_equal(np.asarray(t["f16"].data).reshape(-1), h.astype(np.float16))
    assert t["bf16"].tensor_type == gguf.GGMLQuantizationType.BF16
    assert t["q8"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert list(t["q8"].shape) == [64, 2]
    x = np.float32(np.sin(np.arange(128, dtype=np.float32) * np.float32(0.37)) * 2)
    deq = gguf.quants.dequantize(np.asarray(t["q8"].data), gguf.GGMLQuantizationType.Q8_0)
    assert np.max(np.abs(deq.reshape(-1) - x)) < 2 / 127 * 0.6
    assert t["q4k"].tensor_type == gguf.GGMLQuantizationType.Q4_K
    assert list(t["4d"].shape) == [2, 2, 2, 16]
    assert np.array_equal(np.asarray(t["4d"].data).reshape(-1), np.arange(128, dtype=np.float32))
    for x in reader.tensors:
        assert x.data_offset % 32 == 0
