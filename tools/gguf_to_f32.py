#!/usr/bin/env python3
"""Writes a copy of a GGUF with every tensor dequantized to float32 (same
metadata, same tensor names), using the `gguf` package's own dequantizers.

Used by the Gemma 3 tests: on float32 weights llama.cpp multiplies in
float32 (no int8 activations), so tokamak and llama.cpp can be compared at
float32 precision; on the Q4_K_M file both quantize activations to int8 and
differ by that noise.

    gguf_to_f32.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def main(src, dst):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)  # writes general.architecture itself
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vtype, f.types[-1])
        else:
            w.add_key_value(key, f.contents(), vtype)
    w.add_key_value("general.file_type", 0, GGUFValueType.UINT32)  # LLAMA_FTYPE_ALL_F32
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        a = a.reshape([int(x) for x in reversed(t.shape)])
        w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
