"""Regenerates the committed seed corpus tests/fuzz/corpus/gguf/ (each file < 4 KB).

  .venv/bin/python tests/fuzz/make_gguf_corpus.py BUILD_DIR

Valid seeds come from our writer (BUILD_DIR/tests/tools/gguf_tool write-sample) and from gguf-py's
GGUFWriter; malformed seeds are hand-built byte strings that each hit one reader check.
"""
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

OUT = Path(__file__).resolve().parent / "corpus" / "gguf"
MAGIC = b"GGUF"


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return MAGIC + struct.pack("<IQQ", version, n_tensors, n_kv)


def gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def kv_u32(key: bytes, v: int) -> bytes:
    return gstr(key) + struct.pack("<II", GGUFValueType.UINT32, v)


def tensor_info(name: bytes, dims, type_id: int, offset: int) -> bytes:
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(
        struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", type_id, offset)


def pad(b: bytes, align: int = 32) -> bytes:
    return b + bytes(-len(b) % align)


def write_gguf_py(path: Path) -> None:
    w = GGUFWriter(path, arch="llama")
    w.add_custom_alignment(64)
    w.add_uint32("llama.context_length", 64)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("py.bool", True)
    w.add_int64("py.i64", -5)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("tokenizer.ggml.scores", [0.0, 0.0, -1.0, -2.0])
    w.add_key_value("py.nested", [[1, 2], [3]], GGUFValueType.ARRAY)
    w.add_tensor("norm.weight", np.ones(8, dtype=np.float32))
    w.add_tensor("q.weight", np.arange(36, dtype=np.uint8).reshape(2, 18),
                 raw_dtype=GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    tool = Path(sys.argv[1]) / "tests" / "tools" / "gguf_tool"
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(tool), "write-sample", str(OUT / "mnemo_sample.gguf"), "--alignment",
                    "32"], check=True)
    write_gguf_py(OUT / "gguf_py_small.gguf")
    sample = (OUT / "mnemo_sample.gguf").read_bytes()

    f32_tensor = pad(header(1, 1) + kv_u32(b"general.alignment", 32) +
                     tensor_info(b"w", [4], 0, 0)) + bytes(16)
    nested = header(0, 1) + gstr(b"k") + struct.pack("<I", GGUFValueType.ARRAY)
    for _ in range(20):
        nested += struct.pack("<IQ", GGUFValueType.ARRAY, 1)
    nested += struct.pack("<IQ", GGUFValueType.UINT8, 0)
    seeds = {
        "metadata_only.gguf": header(0, 2) + kv_u32(b"a", 1) + gstr(b"s") +
        struct.pack("<I", GGUFValueType.STRING) + gstr(b"hello"),
        "one_f32_tensor.gguf": f32_tensor,
        "bad_truncated.gguf": sample[:700],
        "bad_magic.gguf": b"GGUG" + sample[4:200],
        "bad_version1.gguf": header(0, 0, version=1),
        "bad_huge_counts.gguf": header(1 << 60, 1 << 60) + bytes(32),
        "bad_huge_array.gguf": header(0, 1) + gstr(b"k") +
        struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT8, 1 << 62) + bytes(8),
        "bad_deep_nesting.gguf": nested,
        "bad_misaligned.gguf": pad(header(1, 0) + tensor_info(b"w", [4], 0, 16)) + bytes(64),
        "bad_block_size.gguf": pad(header(1, 0) + tensor_info(b"w", [33], 2, 0)) + bytes(64),
    }
    for name, data in seeds.items():
        (OUT / name).write_bytes(data)
    for p in sorted(OUT.iterdir()):
        assert p.stat().st_size < 4096, p
        print(p.name, p.stat().st_size)


if __name__ == "__main__":
    main()
