"""The repository's folders, the real models' file names and the build's test tools."""
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures"
REFERENCE_DIR = REPO_ROOT / "tests" / "reference"

# The real models scripts/fetch-model puts in models/ (tests skip when they are absent).
SMOLLM2 = "SmolLM2-135M-Instruct-Q4_1.gguf"
GEMMA3 = "gemma-3-270m-Q4_K_M.gguf"
# Qwen2.5-Coder-Instruct (qwen2): the real models with a tool-calling chat template.
QWEN_CODER_05B = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_CODER_15B = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def tool(build_dir: Path, name: str) -> Path:
    """The test tool `name` of tests/tools/ in the build directory (logits_tool, make_tiny_model,
    ...); fails the test when it has not been built."""
    path = build_dir / "tests" / "tools" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the {name} target")
    return path
