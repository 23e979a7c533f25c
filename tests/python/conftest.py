"""Shared pytest fixtures for mnemo's Python tests (run by scripts/test).

Binaries come from the build directory named by MNEMO_BUILD_DIR (default: <repo>/build); real
models from <repo>/models (scripts/fetch-model).
"""
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


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
    m = models_dir / "SmolLM2-135M-Instruct-Q4_1.gguf"
    if not m.exists():
        pytest.skip(f"{m} missing: run scripts/fetch-model")
    return m
