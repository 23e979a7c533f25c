"""mnemo's GGUF reader and writer against the `gguf` PyPI package (gguf-py).

(1) Files written by our Writer (`gguf_tool write-sample`) are read by gguf.GGUFReader with the
    same keys, value types, values, tensor names, shapes, types, offsets and bytes.
(2) Files written by gguf.GGUFWriter are read by our reader (`gguf_tool dump`) identically.
(3) The real models in models/ (when fetched) read the same through both.

Both sides are turned into one JSON-like shape (see `gguf_tool dump` in tests/tools/gguf_tool.cc):
  {"version", "alignment", "data_offset", "file_size",
   "metadata": [{"key", "type", "value"}],  # array value: {"elem_type", "items": [...]}
   "tensors": [{"name", "dims", "type_id", "offset", "n_bytes", "data"?}]}
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter  # noqa: E402

ALL_VALUE_TYPES = {t.name.lower() for t in GGUFValueType}
MODELS = ["SmolLM2-135M-Instruct-Q4_1.gguf", "gemma-3-270m-Q4_K_M.gguf"]


@pytest.fixture(scope="session")
def gguf_tool(build_dir: Path) -> Path:
    tool = build_dir / "tests" / "tools" / "gguf_tool"
    if not tool.exists():
        pytest.fail(f"{tool} not built (cmake --build {build_dir} --target gguf_tool)")
    return tool


def our_dump(tool: Path, path: Path, data: bool = True) -> dict:
    """Our reader's view of `path`."""
    cmd = [str(tool), "dump", str(path)] + (["--data"] if data else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"gguf_tool dump failed: {proc.stderr}"
    out = json.loads(proc.stdout)
    for t in out["tensors"]:
        del t["type"]  # a name; compared through type_id
    return out


def _walk(parts, i: int, vtype: GGUFValueType):
    """Rebuilds one value from gguf-py's flat ReaderField.parts (nested arrays included, which
    ReaderField.contents() flattens). Returns (value, index of the next part)."""
    if vtype == GGUFValueType.STRING:
        return bytes(parts[i + 1]).decode("utf-8", errors="replace"), i + 2
    if vtype == GGUFValueType.ARRAY:
        elem = GGUFValueType(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            v, i = _walk(parts, i, elem)
            items.append(v)
        return {"elem_type": elem.name.lower(), "items": items}, i
    return parts[i][0].item(), i + 1


def gguf_py_dump(path: Path, data: bool = True) -> dict:
    """gguf-py's view of `path`, in our dump's shape."""
    r = GGUFReader(path)
    fields = list(r.fields.values())
    # GGUFReader puts the header in 3 pseudo-fields first.
    assert [f.name for f in fields[:3]] == ["GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"]
    metadata = []
    for f in fields[3:]:
        vtype = GGUFValueType(int(f.parts[2][0]))  # parts: key length, key bytes, type, value...
        value, end = _walk(f.parts, 3, vtype)
        assert end == len(f.parts)
        metadata.append({"key": f.name, "type": vtype.name.lower(), "value": value})
    tensors = []
    for t in r.tensors:
        tj = {
            "name": t.name,
            "dims": [int(d) for d in t.shape],
            "type_id": int(t.tensor_type),
            "offset": int(t.data_offset) - int(r.data_offset),
            "n_bytes": int(t.n_bytes),
        }
        if data:
            tj["data"] = t.data.tobytes().hex()
        tensors.append(tj)
    return {
        "version": int(fields[0].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "file_size": int(r.data.shape[0]),
        "metadata": metadata,
        "tensors": tensors,
    }


def assert_same(ours: dict, theirs: dict) -> None:
    """Equal, with a readable first difference."""
    for k in ("version", "alignment", "data_offset", "file_size"):
        assert ours[k] == theirs[k], k
    assert [m["key"] for m in ours["metadata"]] == [m["key"] for m in theirs["metadata"]]
    for a, b in zip(ours["metadata"], theirs["metadata"]):
        assert a == b, a["key"]
    assert [t["name"] for t in ours["tensors"]] == [t["name"] for t in theirs["tensors"]]
    for a, b in zip(ours["tensors"], theirs["tensors"]):
        assert a == b, a["name"]
    assert ours == theirs


def nested_types(value, out: set) -> int:
    """Collects element types; returns array nesting depth."""
    if isinstance(value, dict):
        out.add(value["elem_type"])
        return 1 + max([nested_types(v, out) for v in value["items"]], default=0)
    return 0


# (1) Our writer -> gguf-py.


@pytest.mark.parametrize("alignment", [64, 32, 256])
def test_our_writer_is_read_by_gguf_py(gguf_tool, tmp_path, alignment):
    path = tmp_path / "sample.gguf"
    subprocess.run([str(gguf_tool), "write-sample", str(path), "--alignment", str(alignment)],
                   check=True)
    ours = our_dump(gguf_tool, path)
    theirs = gguf_py_dump(path)
    assert_same(ours, theirs)

    # The comparison covers what it claims to.
    assert theirs["alignment"] == alignment
    keys = {m["key"]: m for m in theirs["metadata"]}
    assert ("general.alignment" in keys) == (alignment != 32)
    if alignment != 32:
        assert keys["general.alignment"]["type"] == "uint32"
    assert {m["type"] for m in theirs["metadata"]} == ALL_VALUE_TYPES
    elem_types = set()
    depth = max(nested_types(m["value"], elem_types) for m in theirs["metadata"])
    assert depth == 3
    assert ALL_VALUE_TYPES <= elem_types
    assert any(m["type"] == "array" and not m["value"]["items"] for m in theirs["metadata"])
    type_ids = {t["type_id"] for t in theirs["tensors"]}
    quantized = {GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0,
                 GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K}
    assert {int(q) for q in quantized} <= type_ids
    assert len(theirs["tensors"]) >= 10
    for t in theirs["tensors"]:
        assert t["offset"] % alignment == 0
        assert len(t["data"]) == 2 * t["n_bytes"] > 0
    assert theirs["file_size"] % alignment == 0  # every tensor is padded, as GGUFWriter does


def test_our_writer_values_as_gguf_py_sees_them(gguf_tool, tmp_path):
    """Spot checks against literal values, independent of our reader."""
    path = tmp_path / "sample.gguf"
    subprocess.run([str(gguf_tool), "write-sample", str(path)], check=True)
    r = GGUFReader(path)
    assert r.fields["sample.u64"].contents() == 2**64 - 1
    assert r.fields["sample.i64"].contents() == -(2**63)
    assert r.fields["sample.i8"].contents() == -128
    assert r.fields["sample.f64"].contents() == -2.718281828459045
    assert r.fields["sample.f32"].contents() == float(np.float32(0.1))
    assert r.fields["sample.true"].contents() is True
    assert r.fields["sample.str"].contents() == "h\u00e9llo \u4e16\u754c \U0001f642"
    assert r.fields["sample.arr_str"].contents() == ["a", "", "\u00fc"]
    assert r.fields["sample.arr_u16"].contents() == [0, 65535]
    assert r.fields["sample.arr_nested"].types == [GGUFValueType.ARRAY, GGUFValueType.ARRAY,
                                                   GGUFValueType.INT32]
    assert r.fields["sample.arr_nested"].contents() == [1, 2, -3]  # gguf-py flattens
    by_name = {t.name: t for t in r.tensors}
    assert by_name["f32.weight"].tensor_type == GGMLQuantizationType.F32
    assert list(by_name["f32.weight"].shape) == [8, 3]
    assert by_name["f32.weight"].data.shape == (3, 8)
    assert by_name["q4_k.weight"].n_bytes == 2 * 144
    assert list(by_name["i32.ids"].shape) == [2, 1, 1, 3]
    assert list(by_name["scalar"].shape) == []


# (2) gguf-py's writer -> our reader.


def write_with_gguf_py(path: Path, alignment: int):
    rng = np.random.default_rng(0)
    w = GGUFWriter(path, arch="llama")
    if alignment != 32:
        w.add_custom_alignment(alignment)
    w.add_uint8("py.u8", 200)
    w.add_int8("py.i8", -100)
    w.add_uint16("py.u16", 60000)
    w.add_int16("py.i16", -30000)
    w.add_uint32("py.u32", 4000000000)
    w.add_int32("py.i32", -2000000000)
    w.add_uint64("py.u64", 2**64 - 2)
    w.add_int64("py.i64", -(2**62))
    w.add_float32("py.f32", 0.25)
    w.add_float64("py.f64", 1.0 / 3.0)
    w.add_bool("py.bool", True)
    w.add_string("py.str", "gguf-py \u00e9\u00e8")
    w.add_array("py.arr_i32", [1, -2, 3])
    w.add_array("py.arr_f32", [0.5, 1.5])
    w.add_array("py.arr_str", ["a", "bb", "\u4e16"])
    w.add_array("py.arr_bool", [True, False, True])
    w.add_key_value("py.arr_u8", [1, 2, 255], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT8)
    w.add_key_value("py.arr_u64", [2**63, 5], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
    w.add_key_value("py.arr_f64", [1e-300, 2.0], GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.FLOAT64)
    w.add_key_value("py.nested", [[1, 2], [3]], GGUFValueType.ARRAY)
    w.add_key_value("py.nested3", [[["x", "y"]], [["z"]]], GGUFValueType.ARRAY)
    w.add_context_length(4096)

    tensors = {
        "f32": rng.standard_normal((3, 8)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "i32": rng.integers(-5, 5, (2, 3), dtype=np.int32),
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    # Quantized tensors as raw bytes: Q4_0 rows of 64 elements (2 blocks of 18 bytes), Q4_K rows
    # of 256 (1 block of 144 bytes).
    q4_0 = rng.integers(0, 256, (2, 36), dtype=np.uint8)
    w.add_tensor("q4_0", q4_0, raw_dtype=GGMLQuantizationType.Q4_0)
    q4_k = rng.integers(0, 256, (3, 144), dtype=np.uint8)
    w.add_tensor("q4_k", q4_k, raw_dtype=GGMLQuantizationType.Q4_K)
    tensors["q4_0"] = q4_0
    tensors["q4_k"] = q4_k

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@pytest.mark.parametrize("alignment", [32, 128])
def test_gguf_py_writer_is_read_by_ours(gguf_tool, tmp_path, alignment):
    path = tmp_path / "py.gguf"
    tensors = write_with_gguf_py(path, alignment)
    ours = our_dump(gguf_tool, path)
    assert_same(ours, gguf_py_dump(path))

    # Literal expectations, independent of gguf-py's reader.
    assert ours["version"] == 3
    assert ours["alignment"] == alignment
    md = {m["key"]: (m["type"], m["value"]) for m in ours["metadata"]}
    assert md["general.architecture"] == ("string", "llama")
    assert md["py.u8"] == ("uint8", 200)
    assert md["py.i8"] == ("int8", -100)
    assert md["py.u16"] == ("uint16", 60000)
    assert md["py.i16"] == ("int16", -30000)
    assert md["py.u32"] == ("uint32", 4000000000)
    assert md["py.i32"] == ("int32", -2000000000)
    assert md["py.u64"] == ("uint64", 2**64 - 2)
    assert md["py.i64"] == ("int64", -(2**62))
    assert md["py.f32"] == ("float32", 0.25)
    assert md["py.f64"] == ("float64", 1.0 / 3.0)
    assert md["py.bool"] == ("bool", True)
    assert md["py.str"] == ("string", "gguf-py \u00e9\u00e8")
    assert md["py.arr_i32"] == ("array", {"elem_type": "int32", "items": [1, -2, 3]})
    assert md["py.arr_str"] == ("array", {"elem_type": "string", "items": ["a", "bb", "\u4e16"]})
    assert md["py.arr_u64"] == ("array", {"elem_type": "uint64", "items": [2**63, 5]})
    assert md["py.nested"] == ("array", {"elem_type": "array", "items": [
        {"elem_type": "int32", "items": [1, 2]}, {"elem_type": "int32", "items": [3]}]})
    assert md["py.nested3"][1]["items"][1] == {
        "elem_type": "array", "items": [{"elem_type": "string", "items": ["z"]}]}
    assert md["llama.context_length"] == ("uint32", 4096)
    by_name = {t["name"]: t for t in ours["tensors"]}
    assert by_name["f32"]["dims"] == [8, 3]
    assert by_name["f32"]["type_id"] == int(GGMLQuantizationType.F32)
    assert by_name["f16"]["type_id"] == int(GGMLQuantizationType.F16)
    assert by_name["q4_0"]["dims"] == [64, 2]
    assert by_name["q4_k"]["dims"] == [256, 3]
    for name, arr in tensors.items():
        assert by_name[name]["data"] == arr.tobytes().hex(), name
        assert by_name[name]["offset"] % alignment == 0


def test_dump_rejects_malformed_file(gguf_tool, tmp_path):
    good = tmp_path / "good.gguf"
    subprocess.run([str(gguf_tool), "write-sample", str(good)], check=True)
    raw = good.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(raw[: len(raw) // 2])
    proc = subprocess.run([str(gguf_tool), "dump", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Corruption" in proc.stderr and "byte offset" in proc.stderr
    bad.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    proc = subprocess.run([str(gguf_tool), "dump", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "NotSupported" in proc.stderr and "version 1" in proc.stderr
    with pytest.raises(ValueError):
        GGUFReader(bad)  # gguf-py agrees


# (3) Real models.


@pytest.mark.parametrize("model", MODELS)
def test_real_model_reads_like_gguf_py(gguf_tool, models_dir, model):
    path = models_dir / model
    if not path.exists():
        pytest.skip(f"{path} not present (scripts/fetch-model)")
    ours = our_dump(gguf_tool, path, data=False)
    theirs = gguf_py_dump(path, data=False)
    assert_same(ours, theirs)
    assert len(ours["tensors"]) > 50
    assert any(m["key"] == "tokenizer.ggml.tokens" for m in ours["metadata"])
