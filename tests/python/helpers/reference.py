"""Independent references for the forward pass: the numpy twins of tests/reference/ (forward.py
for the attention architectures, mamba2.py for Mamba-2 mixers; both read a GGUF file with
gguf-py), logits_tool (mnemo's logits for one token sequence), and checks against llama.cpp's
fixtures on the tiny models (tests/fixtures/logits_tiny_*.json, made by
tests/reference/make_recurrent_fixtures.sh)."""
import hashlib
import json
import subprocess
import sys

import numpy as np

from helpers.paths import FIXTURES_DIR, REFERENCE_DIR, tool
from helpers.tiny_models import make_tiny_model

# The references stay in tests/reference/ (they also run as scripts: python forward.py MODEL
# TOKEN...); mamba2.py imports forward.py as a top-level module, so the folder goes on sys.path,
# once, here.
if str(REFERENCE_DIR) not in sys.path:
    sys.path.insert(0, str(REFERENCE_DIR))
import forward  # noqa: E402
import mamba2  # noqa: E402

__all__ = ["forward", "mamba2", "logits_tool", "full_logits", "tiny_fixture",
           "llama_cpp_differences", "check_against_llama_cpp", "check_ubatch_invariance"]


def logits_tool(build_dir, model, tokens, *extra, full=False, ids=()):
    """logits_tool's rows for `tokens` decoded as one sequence (one JSON object per position:
    top ids and log-probabilities; with full=True every logit; with `ids` the log-probabilities
    of those ids); `extra` are more logits_tool flags (-ub, -b, -t, -c, ...)."""
    cmd = [str(tool(build_dir, "logits_tool")), str(model), "--tokens",
           ",".join(map(str, tokens))]
    if full:
        cmd.append("--full")
    if ids:
        cmd += ["--ids", ",".join(map(str, ids))]
    cmd += list(extra)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def full_logits(build_dir, model, tokens, *extra):
    """Every logit at every position, [len(tokens), n_vocab], decoded on one thread unless
    `extra` says otherwise (logits_tool --full -t 1 EXTRA...)."""
    rows = logits_tool(build_dir, model, tokens, "-t", "1", *extra, full=True)
    return np.array([r["logits"] for r in rows])


def tiny_fixture(build_dir, tmp_path, name):
    """tests/fixtures/logits_tiny_<name>.json and the tiny model it was made on, remade with the
    fixture's make_tiny_model arguments (same bytes, by SHA-256): (fixture dict, model path)."""
    fixture = json.loads((FIXTURES_DIR / f"logits_tiny_{name}.json").read_text())
    args = fixture["meta"]["make_tiny_model_args"].split()
    path = make_tiny_model(build_dir, tmp_path / f"{name}.gguf", args[0], *args[1:])
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha == fixture["meta"]["model_sha256"], (
        "the tiny model writer changed: rerun tests/reference/make_recurrent_fixtures.sh")
    return fixture, path


def llama_cpp_differences(build_dir, path, fixture, bound):
    """mnemo's log-probabilities on `path` against llama.cpp's in `fixture` (a logits_tiny_*.json
    document), per prompt: (n_tokens, max |difference| over every position and llama.cpp's top 20
    ids, positions where llama.cpp's margin between its top two exceeds `bound` and mnemo's top-1
    is another id)."""
    out = []
    for prompt in fixture["prompts"]:
        tokens = prompt["tokens"]
        ours = full_logits(build_dir, path, tokens)
        lse = np.log(np.exp(ours - ours.max(axis=1, keepdims=True)).sum(axis=1)) + ours.max(axis=1)
        max_diff, wrong_top1 = 0.0, []
        for i, (ids, lps) in enumerate(zip(prompt["top_ids"], prompt["top_logprobs"])):
            mine = ours[i, ids] - lse[i]
            max_diff = max(max_diff, float(np.abs(mine - np.array(lps)).max()))
            if lps[0] - lps[1] > bound and int(ours[i].argmax()) != ids[0]:
                wrong_top1.append(i)
        out.append((len(tokens), max_diff, wrong_top1))
    return out


def check_against_llama_cpp(build_dir, tmp_path, name, bound):
    """Remakes the tiny model of tests/fixtures/logits_tiny_<name>.json (tiny_fixture) and
    compares mnemo's log-probabilities of llama.cpp's top 20 at every position of every prompt:
    max |difference| <= bound, and the same top-1 wherever llama.cpp's margin exceeds the
    bound."""
    fixture, path = tiny_fixture(build_dir, tmp_path, name)
    for n, max_diff, wrong_top1 in llama_cpp_differences(build_dir, path, fixture, bound):
        assert not wrong_top1, f"{name} ({n} tokens): top-1 differs at positions {wrong_top1}"
        assert max_diff <= bound, (
            f"{name} ({n} tokens): max |logprob diff| {max_diff:.2e} > {bound}")


def check_ubatch_invariance(build_dir, tmp_path, args):
    """The tiny model make_tiny_model writes with `args` (ARCH FLAGS...) gives bit-identical
    logits for a prompt whatever the ubatch size (1, 3, 7, the whole prompt) and thread count
    (1, 2)."""
    path = make_tiny_model(build_dir, tmp_path / ("_".join(args) + ".gguf").replace("--", ""),
                           *args)
    tokens = [1, 337, 396, 410, 410, 416, 431, 416, 422, 410, 5, 17, 200, 3, 99, 42, 7, 300]
    whole = full_logits(build_dir, path, tokens)
    for ub in ("1", "3", "7"):
        assert np.array_equal(full_logits(build_dir, path, tokens, "-ub", ub, "-b", ub), whole), ub
        # Two threads: few rows take whole experts per thread, many rows split each expert.
        assert np.array_equal(
            full_logits(build_dir, path, tokens, "-t", "2", "-ub", ub, "-b", ub), whole), ub
