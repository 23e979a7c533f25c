"""The recurrent architectures (mamba2, granitehybrid) against the numpy reference.

Tiny random-weight models written by tests/tools/make_tiny_model (tests/support/tiny_ssm_model.cc)
are decoded by mnemo (logits_tool) and by tests/reference/mamba2.py, which reads the same file
with gguf-py and computes each Mamba-2 mixer in its dual (masked matrix) form instead of mnemo's
token-by-token recurrence.

Bounds, and why:
- quantized weights: |ours - numpy| <= 0.05 * (max |logit| + 1), as tests/python/test_engine.py:
  our matmuls quantize activations to 8 bits per 32 values; numpy works in float64.
- f32 weights (--f32): 1e-3 * (max |logit| + 1): only float32 rounding (and f16 K/V in the
  attention layer) remains; measured about 1e-6 (mamba2) and 3e-5 (granitehybrid). A wrong
  group mapping, conv tap order, decay sign or norm grouping moves logits by O(0.1) or more.
Every ubatch size gives bit-identical logits (the state carries across ubatches; the scan runs
token by token whatever the ubatch, and one-row and many-row matmuls compute each element by the
same operations: docs/numerics.md), quantized and f32 weights alike, on every SIMD target.
"""
import numpy as np
import pytest

from helpers.reference import (check_against_llama_cpp, check_ubatch_invariance, full_logits,
                               mamba2)
from helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.kernels

TOKENS = [5, 17, 200, 3, 99, 511, 42, 42, 7, 300, 1, 2, 250, 128, 64, 33, 400, 12, 9, 77, 123,
          321, 45, 46, 8, 8, 8, 100]

VARIANTS = {
    "mamba2": ["mamba2"],
    "mamba2_f32": ["mamba2", "--f32"],
    "granitehybrid": ["granitehybrid"],
    "granitehybrid_f32": ["granitehybrid", "--f32"],
    "granitehybrid_rope": ["granitehybrid", "--rope"],
}


@pytest.fixture(scope="module")
def models(build_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_ssm")
    return {name: make_tiny_model(build_dir, d / f"{name}.gguf", args[0], "--seed", "3", *args[1:])
            for name, args in VARIANTS.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_tiny_recurrent_model_matches_numpy(build_dir, models, name):
    path = models[name]
    ref = mamba2.forward(str(path), TOKENS)
    rel = 1e-3 if name.endswith("_f32") else 0.05
    bound = rel * (np.abs(ref).max() + 1.0)
    first = None
    for ub in ["512", "7", "1"]:
        ours = full_logits(build_dir, path, TOKENS, "-ub", ub)
        assert ours.shape == ref.shape
        err = np.abs(ours - ref).max()
        assert err <= bound, f"{name} -ub {ub}: max |diff| {err:.6f} > {bound:.6f}"
        assert (ours.argmax(axis=1) == ref.argmax(axis=1)).mean() >= 0.9
        if first is None:
            first = ours
        else:
            assert np.array_equal(ours, first), (
                f"{name}: -ub {ub} differs from -ub 512 by {np.abs(ours - first).max():.3g}")


@pytest.mark.parametrize("args", [["mamba2", "--seed", "3"], ["granitehybrid", "--seed", "3"]])
def test_recurrent_logits_do_not_depend_on_the_ubatch_or_threads(build_dir, tmp_path, args):
    """Quantized weights, -ub / -b 1, 3, 7 and 1 or 2 threads: bit-identical logits."""
    check_ubatch_invariance(build_dir, tmp_path, args)


def test_state_matters(models):
    """The reference itself: later logits depend on earlier tokens through the state (a model
    whose state did nothing would pass the comparison trivially)."""
    a = mamba2.forward(str(models["mamba2_f32"]), TOKENS)
    b = mamba2.forward(str(models["mamba2_f32"]), [1] + TOKENS[1:])
    assert np.abs(a[-1] - b[-1]).max() > 1e-3


# llama.cpp (the peer, tests/reference/make_recurrent_fixtures.sh) on the very files our writer
# makes. Loading them at all checks tensor names, shapes and metadata keys against llama.cpp's
# mamba2 / granitehybrid loaders; the log-probabilities check the forward pass. Bounds: f32
# weights 1e-3 nats (measured 2e-6 mamba2, 3e-5 granitehybrid: f16 K/V in both engines);
# quantized weights 0.05 nats (measured 5e-3: both quantize activations to 8 bits, in different
# summation orders), top-1 equal wherever llama.cpp's margin exceeds that.
FIXTURES = {"mamba2_f32": 1e-3, "granitehybrid_f32": 1e-3, "granitehybrid": 0.05}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_tiny_recurrent_model_matches_llama_cpp(build_dir, tmp_path, name):
    check_against_llama_cpp(build_dir, tmp_path, name, FIXTURES[name])