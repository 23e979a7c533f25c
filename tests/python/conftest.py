"""Shared pytest fixtures and the `kernels` marker for mnemo's Python tests (run by scripts/test).

Binaries come from the build directory named by MNEMO_BUILD_DIR (default: <repo>/build); real
models from <repo>/models (scripts/fetch-model). Under CI (the environment variable CI set and not
empty, as .ci/run sets it) the skipped tests are listed with their reasons (-rs), and a skip that
skip_allowlist.txt does not allow fails the run (helpers/skip_gate.py). Code shared by several
test modules lives in the `helpers` package beside this file (helpers/__init__.py lists its
modules); test modules never import one another.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# `import helpers...` works whatever pytest's import mode and working directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.paths import QWEN_CODER_05B, QWEN_CODER_15B, REPO_ROOT, SMOLLM2  # noqa: E402
from helpers.skip_gate import SkipGate, in_ci  # noqa: E402
from helpers.tiny_models import make_tiny_models  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "kernels: the module's results depend on the SIMD kernels (llama.cpp bounds, bit-identical "
        "answers, cached and shared prompts); scripts/test runs `pytest -m kernels` again under "
        "every SIMD target of the CPU below its best (MNEMO_SIMD)")
    if in_ci():
        config.pluginmanager.register(SkipGate(config), "mnemo_skip_gate")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def build_dir() -> Path:
    """The CMake build directory holding the binaries under test (env MNEMO_BUILD_DIR)."""
    d = Path(os.environ.get("MNEMO_BUILD_DIR", REPO_ROOT / "build")).resolve()
    if not d.is_dir():
        pytest.fail(f"build directory {d} does not exist: run scripts/build or set MNEMO_BUILD_DIR")
    return d


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """Where scripts/fetch-model puts the real GGUF models (may lack some: tests skip then)."""
    return REPO_ROOT / "models"


@pytest.fixture(scope="session")
def binary(build_dir) -> Path:
    """The mnemo executable under test."""
    b = build_dir / "mnemo"
    if not b.exists():
        pytest.fail(f"{b} is missing: build the mnemo target")
    return b


@pytest.fixture(scope="session")
def smollm2_model(models_dir) -> Path:
    """The default real model (skips the test when it has not been fetched)."""
    m = models_dir / SMOLLM2
    if not m.exists():
        pytest.skip(f"{m} missing: run scripts/fetch-model")
    return m


@pytest.fixture(scope="session")
def qwen_coder_05b(models_dir) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct (Hermes tool calls); skips when it has not been fetched."""
    m = models_dir / QWEN_CODER_05B
    if not m.exists():
        pytest.skip(f"{m} missing: run scripts/fetch-model")
    return m


@pytest.fixture(scope="session")
def qwen_coder_15b(models_dir) -> Path:
    """Qwen2.5-Coder-1.5B-Instruct (Hermes tool calls); skips when it has not been fetched."""
    m = models_dir / QWEN_CODER_15B
    if not m.exists():
        pytest.skip(f"{m} missing: run scripts/fetch-model")
    return m


@pytest.fixture(scope="session")
def model(smollm2_model) -> Path:
    """The model the server tests serve (SmolLM2, helpers.paths.SMOLLM2, the name they expect in
    /v1/models and /props); skips when it has not been fetched."""
    assert smollm2_model.name == SMOLLM2
    return smollm2_model


@pytest.fixture(scope="session")
def tiny_recurrent(build_dir, tmp_path_factory) -> dict:
    """{arch: path} of tiny mamba2, granitehybrid and qwen35 models (seed 11), which carry a small
    SentencePiece vocabulary so that `mnemo serve` loads them (test_recurrent_server.py,
    test_prompt_cache.py)."""
    return make_tiny_models(build_dir, tmp_path_factory.mktemp("tiny_recurrent"),
                            ["mamba2", "granitehybrid", "qwen35"], "--seed", "11")


@pytest.fixture(scope="module")
def template_cli(binary):
    """The mnemo binary, once it is known to have the `template` subcommand."""
    proc = subprocess.run([str(binary), "template", "--help"], capture_output=True, timeout=60)
    if proc.returncode != 0:
        pytest.fail("`mnemo template` is not available (`mnemo template --help` exited "
                    f"{proc.returncode}):\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return binary
