"""Mixture of experts (qwen3moe) against llama.cpp on the very file our writer makes.

tests/tools/make_tiny_model writes a tiny qwen3moe GGUF (8 experts of width 256, 2 per token,
f32 router, experts in q8_0 / q4_K / q5_K / q6_K, or all f32 with --f32) with llama.cpp's keys
and tensor names; tests/reference/make_recurrent_fixtures.sh ran llama.cpp (the peer) on it and
kept the top-20 log-probabilities at every position as tests/fixtures/logits_tiny_qwen3moe*.json.
That llama.cpp loads the file at all checks the names, shapes and metadata; the log-probabilities
check the router (softmax, top-k, renormalized gate values) and the experts.

Bounds, measured (AMD EPYC Zen 4, under each SIMD target: AVX3_DL, AVX2, SSE4 differ by < 3e-5;
llama.cpp's fixtures for the recurrent models were identical from a Sapphire Rapids and a Zen 4
run):
- f32 weights: 5e-3 nats (measured 1.84e-3). The dense qwen3 tiny file of the same shapes
  differs from llama.cpp by 2.3e-3 too, growing from 5e-7 at position 0 (one cell attended) to
  ~1e-3 later: the attention with f16 K/V, not the experts. A wrong routing (top-k, a missing
  renormalization, sigmoid instead of softmax) moves log-probabilities by O(0.1) or more.
- quantized weights: 0.3 nats (measured 0.18; the dense qwen3 file: 0.14): both engines quantize
  activations to 8 bits, in different block shapes, on random blocks with large scales. Top-1 is
  compared wherever llama.cpp's margin exceeds the bound.
Batch invariance: every ubatch size and thread count gives bit-identical logits (a row's experts
are chosen and added in the same order whatever the other rows; with few rows the threads take
whole experts, with many each expert is split over them).
"""
import numpy as np
import pytest

from helpers.reference import check_against_llama_cpp, check_ubatch_invariance, full_logits
from helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.kernels

FIXTURES = {"qwen3moe_f32": 5e-3, "qwen3moe": 0.3}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_tiny_moe_matches_llama_cpp(build_dir, tmp_path, name):
    check_against_llama_cpp(build_dir, tmp_path, name, FIXTURES[name])


@pytest.mark.parametrize("args", [["qwen3moe", "--seed", "3"], ["qwen3moe", "--seed", "5"]])
def test_moe_logits_do_not_depend_on_the_ubatch(build_dir, tmp_path, args):
    check_ubatch_invariance(build_dir, tmp_path, args)


def test_an_unused_dense_width_changes_nothing(build_dir, tmp_path):
    """qwen3moe's feed_forward_length sizes no layer (every block uses the experts; llama.cpp
    ignores it too): a file with an absurd value there gives the very same logits, instead of
    the engine reserving scratch for a 4-billion-wide dense feed-forward."""
    path = make_tiny_model(build_dir, tmp_path / "qwen3moe_seed_5.gguf", "qwen3moe", "--seed", "5")
    data = path.read_bytes()
    key = b"qwen3moe.feed_forward_length" + (4).to_bytes(4, "little")  # then type uint32 (4)
    start = data.index(key) + len(key)
    bad = data[:start] + (0xFFFFFFFF).to_bytes(4, "little") + data[start + 4:]
    odd = tmp_path / "odd_width.gguf"
    odd.write_bytes(bad)
    tokens = [1, 7, 42, 300, 5]
    assert np.array_equal(full_logits(build_dir, path, tokens), full_logits(build_dir, odd, tokens))
