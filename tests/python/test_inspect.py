"""`mnemo inspect` on the real models, checked against the gguf package's reading of the file."""
import json
import subprocess

import gguf
import pytest

MODELS = [
    ("SmolLM2-135M-Instruct-Q4_1.gguf", "llama", 30),
    ("gemma-3-270m-Q4_K_M.gguf", "gemma3", 18),
]


def run_inspect(build_dir, *args):
    return subprocess.run([str(build_dir / "mnemo"), "inspect", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name,arch,blocks", MODELS)
def test_inspect_real_model(build_dir, models_dir, name, arch, blocks):
    path = models_dir / name
    if not path.exists():
        pytest.skip(f"{path} not fetched (scripts/fetch-model)")
    text = run_inspect(build_dir, str(path))
    assert text.returncode == 0, text.stderr
    assert f"architecture:  {arch}" in text.stdout
    assert f"blocks:        {blocks}" in text.stdout

    res = run_inspect(build_dir, "--json", str(path))
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["architecture"] == arch
    assert report["n_blocks"] == blocks

    reader = gguf.GGUFReader(str(path))
    assert report["n_tensors"] == len(reader.tensors)
    ours = {t["name"]: t for t in report["tensors"]}
    for t in reader.tensors:
        mine = ours[t.name]
        assert mine["type"].upper() == t.tensor_type.name.upper()
        assert mine["shape"] == [int(d) for d in t.shape]
        assert mine["bytes"] == int(t.n_bytes)
    assert report["n_params"] == sum(int(t.n_elements) for t in reader.tensors)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    assert report["tokenizer"]["vocab_size"] == vocab


def test_inspect_bad_file_is_a_clear_error(build_dir, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 60)
    res = run_inspect(build_dir, str(bad))
    assert res.returncode == 1
    assert "magic" in res.stderr.lower()
    missing = run_inspect(build_dir, str(tmp_path / "missing.gguf"))
    assert missing.returncode == 1
    assert "NotFound" in missing.stderr or "not found" in missing.stderr.lower()
