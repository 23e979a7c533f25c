"""qwen35 and qwen35moe (Qwen3.5: Gated DeltaNet + gated attention; qwen35moe adds experts and a
gated shared expert) against llama.cpp on the very files our writer makes.

tests/tools/make_tiny_model writes tiny qwen35 / qwen35moe GGUFs with llama.cpp's keys and tensor
names (tests/support/tiny_ssm_model.h describes them: 2 key heads and 4 value heads, so the value
head -> key head mapping is exercised); tests/reference/make_recurrent_fixtures.sh ran llama.cpp
(the peer) on them and kept the top-20 log-probabilities at every position as
tests/fixtures/logits_tiny_qwen35*.json. llama.cpp computes a prompt's Gated DeltaNet with its
chunked algorithm, mnemo token by token: the same function in another summation order.

Bounds, measured (AMD EPYC Zen 4, each SIMD target; AVX3_DL, AVX2 and SSE4 agree to < 1e-4 with
f32 weights and 0.05 nats with quantized ones):
- f32 weights: qwen35 2e-3 nats (measured 9.3e-4), qwen35moe 1e-3 (measured 2.7e-4); 1e-5 at
  position 0, growing as the f16 K/V of the attention layer and the state's rounding add up. A
  wrong head mapping, decay, gate or norm moves log-probabilities by O(0.1) or more.
- quantized weights, qwen35: 0.6 nats (measured 0.46). Most of it is the random q4_K / q5_K /
  q6_K feed-forward (the same file with f32 feed-forward weights: 0.25), where both engines
  quantize activations to 8 bits in their own block shapes; the dense qwen3 file shows 0.14.
- quantized weights, qwen35moe (legacy-quant experts): 0.5 nats (measured 0.38; typically 0.04
  per position, with one or two positions where the router's top-2 nearly ties, seeds 4 and 5:
  0.28, 0.14). Top-1 is compared wherever llama.cpp's margin exceeds the bound.
Batch invariance: every ubatch size and thread count gives bit-identical logits.
"""
import subprocess

import numpy as np
import pytest

from helpers.paths import tool
from helpers.reference import check_against_llama_cpp, check_ubatch_invariance, full_logits
from helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.kernels

FIXTURES = {"qwen35_f32": 2e-3, "qwen35": 0.6, "qwen35moe_f32": 1e-3, "qwen35moe": 0.5}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_tiny_qwen35_matches_llama_cpp(build_dir, tmp_path, name):
    check_against_llama_cpp(build_dir, tmp_path, name, FIXTURES[name])


@pytest.mark.parametrize("args", [["qwen35", "--seed", "3"], ["qwen35moe", "--seed", "5"]])
def test_qwen35_logits_do_not_depend_on_the_ubatch(build_dir, tmp_path, args):
    check_ubatch_invariance(build_dir, tmp_path, args)


def test_state_carries_information(build_dir, tmp_path):
    """Later logits depend on earlier tokens through the Gated DeltaNet state and the attention
    layer: changing the first token changes the last position's logits (a model whose mixers did
    nothing would pass the comparisons trivially)."""
    path = make_tiny_model(build_dir, tmp_path / "qwen35.gguf", "qwen35", "--seed", "3", "--f32")
    tokens = [5, 17, 200, 3, 99, 42, 7, 300, 12, 9]
    a = full_logits(build_dir, path, tokens)
    b = full_logits(build_dir, path, [6] + tokens[1:])
    assert np.abs(a[-1] - b[-1]).max() > 1e-2


def test_inspect_shows_the_hybrid_layout(build_dir, tmp_path):
    path = make_tiny_model(build_dir, tmp_path / "qwen35moe.gguf", "qwen35moe", "--seed", "3")
    out = subprocess.run([str(build_dir / "mnemo"), "inspect", str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "architecture:  qwen35moe" in out
    for key, value in [("full_attention_interval", "4"), ("ssm.time_step_rank", "4"),
                       ("ssm.group_count", "2"), ("expert_shared_feed_forward_length", "256")]:
        assert any(line.split()[:2] == [f"qwen35moe.{key}", value] for line in out.splitlines()), key
    assert "blk.0.ssm_alpha.weight" in out and "blk.3.attn_q.weight" in out


@pytest.mark.parametrize("patch,message", [
    # inner_size must be value heads x head dim (4 x 32 = 128).
    (lambda b: b.replace(b"qwen35.ssm.inner_size" + (4).to_bytes(4, "little")
                         + (128).to_bytes(4, "little"),
                         b"qwen35.ssm.inner_size" + (4).to_bytes(4, "little")
                         + (100).to_bytes(4, "little")), "inner_size"),
    (lambda b: b.replace(b"blk.0.ssm_alpha.weight", b"blk.0.ssm_alphx.weight"),
     "missing tensor blk.0.ssm_alpha.weight"),
    (lambda b: b.replace(b"qwen35.full_attention_interval" + (4).to_bytes(4, "little")
                         + (4).to_bytes(4, "little"),
                         b"qwen35.full_attention_interval" + (4).to_bytes(4, "little")
                         + (0).to_bytes(4, "little")), "full_attention_interval"),
])
def test_malformed_qwen35_files_are_clear_errors(build_dir, tmp_path, patch, message):
    path = make_tiny_model(build_dir, tmp_path / "qwen35.gguf", "qwen35", "--seed", "3")
    data = path.read_bytes()
    bad = patch(data)
    assert bad != data, "the patch did not apply"
    path.write_bytes(bad)
    res = subprocess.run([str(tool(build_dir, "logits_tool")), str(path),
                          "--tokens", "1,2,3"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert message in res.stderr, res.stderr
