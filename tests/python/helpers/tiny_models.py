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
