"""Tiny random-weight model files for the tests, written by tests/tools/make_tiny_model (which
runs write_tiny_model of tests/support/tiny_model.h, the writer the C++ tests and the fuzzers
link): the one way a Python test makes a model file."""
import subprocess
from pathlib import Path

from helpers.paths import tool


def make_tiny_model(build_dir: Path, path: Path, arch: str, *flags) -> Path:
    """Writes a tiny `arch` model (llama, qwen2, qwen3, qwen3moe, gemma3, mamba2, granitehybrid,
    qwen35, qwen35moe, or a *-bench shape) to `path` with make_tiny_model's `flags` (--seed N,
    --f32, --rope, --layers N; tests/support/tiny_model.h says what they mean) and returns
    `path`. The same arguments give the same bytes."""
    subprocess.run([str(tool(build_dir, "make_tiny_model")), arch, str(path), *map(str, flags)],
                   check=True)
    return path


def make_tiny_models(build_dir: Path, directory: Path, archs, *flags) -> dict:
    """{arch: path} of tiny models of each of `archs`, written into `directory` as ARCH.gguf with
    the same `flags`."""
    return {arch: make_tiny_model(build_dir, directory / f"{arch}.gguf", arch, *flags)
            for arch in archs}


def break_qwen35_heads(src: Path, dst: Path, what: str, layers=(0, 1, 2)) -> Path:
    """Copies the tiny qwen35 / qwen35moe file `src` to `dst` with the Gated DeltaNet blocks
    `layers` altered to stand for a bug in mnemo's head mapping or gates, and returns `dst`. Only
    whole rows (or, in ssm_out, whole quantization blocks of one head's 32 columns) are swapped,
    so quantized tensors stay valid and the file keeps its size and metadata. `what`:
      "key_heads"  key heads 0 and 1 swapped (their q and k rows of attn_qkv and channels of
                   ssm_conv1d): value head h reads key head (h + 1) % Hk instead of h % Hk;
      "tiled"      value heads 1 and 2 swapped in every tensor that has one row (or column block)
                   per value head: with 4 value heads and 2 key heads, value head h then reads
                   key head h // 2, the other of the two natural mappings;
      "gate"       value heads 0 and 1 of attn_gate (the output gate z) swapped;
      "beta"       value heads 0 and 1 of ssm_beta (the delta rule's write strength) swapped.
    Layouts (tests/support/tiny_ssm_model.h, src/model/model_qwen35.cc): attn_qkv and ssm_conv1d
    rows are q (Hk x d), k (Hk x d), v (Hv x d); attn_gate rows Hv x d; ssm_beta, ssm_alpha,
    ssm_dt.bias and ssm_a one row per value head; ssm_out rows of Hv x d columns."""
    import numpy as np
    from gguf import GGUFReader

    reader = GGUFReader(str(src))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    key = lambda k: int(reader.fields[f"{arch}.{k}"].parts[-1][0])  # noqa: E731
    d, hk, hv = key("ssm.state_size"), key("ssm.group_count"), key("ssm.time_step_rank")
    data = bytearray(Path(src).read_bytes())
    tensors = {t.name: t for t in reader.tensors}

    def rows(name, n_rows):
        t = tensors[name]
        return np.frombuffer(data, dtype=np.uint8, count=t.data.nbytes,
                             offset=int(t.data_offset)).reshape(n_rows, -1)

    def swap(view, a, b, width):
        va, vb = view[a:a + width].copy(), view[b:b + width].copy()
        view[a:a + width], view[b:b + width] = vb, va

    n_qkv = 2 * hk * d + hv * d
    for layer in layers:
        blk = f"blk.{layer}."
        qkv, conv = rows(blk + "attn_qkv.weight", n_qkv), rows(blk + "ssm_conv1d.weight", n_qkv)
        if what == "key_heads":
            for view in (qkv, conv):
                for base in (0, hk * d):
                    swap(view, base, base + d, d)
        elif what == "tiled":
            for view in (qkv, conv):
                swap(view, 2 * hk * d + d, 2 * hk * d + 2 * d, d)
            swap(rows(blk + "attn_gate.weight", hv * d), d, 2 * d, d)
            for name in ("ssm_beta.weight", "ssm_alpha.weight", "ssm_dt.bias", "ssm_a"):
                swap(rows(blk + name, hv), 1, 2, 1)
            out = rows(blk + "ssm_out.weight", int(tensors[blk + "ssm_out.weight"].shape[1]))
            assert out.shape[1] % hv == 0, "ssm_out's blocks do not align with its heads"
            w = out.shape[1] // hv
            a, b = out[:, w:2 * w].copy(), out[:, 2 * w:3 * w].copy()
            out[:, w:2 * w], out[:, 2 * w:3 * w] = b, a
        elif what == "gate":
            swap(rows(blk + "attn_gate.weight", hv * d), 0, d, d)
        elif what == "beta":
            swap(rows(blk + "ssm_beta.weight", hv), 0, 1, 1)
        else:
            raise ValueError(f"unknown break {what!r}")
    Path(dst).write_bytes(bytes(data))
    return Path(dst)
