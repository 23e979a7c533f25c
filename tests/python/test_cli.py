"""`mnemo run` and `mnemo bench` as a user calls them: llama.cpp's flag names,
streamed text, the timing lines, llama-bench's JSON fields, repacking on and off, and clear
errors (exit status 1 or 2, a message naming the problem, never a crash) for bad input.
"""
import json
import re
import os
import subprocess

import pytest

pytestmark = pytest.mark.kernels


@pytest.fixture(scope="module")
def mnemo(binary):
    return binary


@pytest.fixture(scope="module")
def smollm2(smollm2_model):
    return smollm2_model


def run(mnemo, *args, timeout=120):
    return subprocess.run([str(mnemo), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_run_streams_text_and_reports_speed(mnemo, smollm2):
    r = run(mnemo, "run", "-m", smollm2, "-p", "The capital of France is", "-n", 8, "--temp", 0,
            "-t", 2, "-c", 256, "-b", 64, "-ub", 7, "-ctk", "q8_0", "-ctv", "q8_0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is")
    assert len(r.stdout) > len("The capital of France is")
    assert "load" in r.stderr and "tok/s" in r.stderr and "generation" in r.stderr


def test_run_with_and_without_repacking(mnemo, smollm2):
    """Repacking is the default where the CPU has the kernels for it; -nr / --no-repack keeps
    the file's layout. Both generate; greedy text may part only after a near-tie, so only the
    start is compared."""
    args = ["run", "-m", smollm2, "-p", "One, two, three,", "-n", 6, "--temp", 0, "-c", 128]
    packed = run(mnemo, *args)
    plain = run(mnemo, *args, "-nr")
    long_plain = run(mnemo, *args, "--no-repack")
    for r in (packed, plain, long_plain):
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("One, two, three,")
    assert "repacked" not in plain.stderr and "repacked" not in long_plain.stderr
    if "simd AVX3_DL" in packed.stderr:  # AVX-512 VNNI: every linear weight is repacked
        assert "211 weight matrices repacked" in packed.stderr, packed.stderr


@pytest.mark.parametrize("args, exit_code, needle", [
    (["-ctk", "q7_0"], 2, "-ctk"),
    (["-ctv", "nonsense"], 2, "-ctv"),
    (["-t", "-3"], 2, "n_threads"),
    (["--top-p", "1.5"], 2, "top"),
    # Scratch for two billion rows per forward pass cannot be had: an error naming -ub, not a
    # std::bad_alloc abort.
    (["-b", "2000000000", "-ub", "2000000000"], 1, "lower -ub"),
])
def test_run_rejects_bad_flags_clearly(mnemo, smollm2, args, exit_code, needle):
    r = run(mnemo, "run", "-m", smollm2, "-p", "hi", "-n", 1, *args)
    assert r.returncode == exit_code, (r.returncode, r.stderr)
    assert needle in r.stderr


def test_run_rejects_a_missing_or_malformed_model(mnemo, tmp_path):
    r = run(mnemo, "run", "-m", tmp_path / "absent.gguf", "-p", "hi", "-n", 1)
    assert r.returncode == 1 and "absent.gguf" in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    r = run(mnemo, "run", "-m", bad, "-p", "hi", "-n", 1)
    assert r.returncode == 1 and "bad.gguf" in r.stderr
    assert "Traceback" not in r.stderr and "Aborted" not in r.stderr


def test_bench_json_has_llama_bench_fields(mnemo, smollm2):
    r = run(mnemo, "bench", "-m", smollm2, "-t", 2, "-p", 16, "-n", 4, "-d", "0,32", "-r", 2,
            "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout[r.stdout.index("["):])
    tests = {(x["n_prompt"], x["n_gen"], x["n_depth"]) for x in rows}
    assert tests == {(16, 0, 0), (0, 4, 0), (16, 0, 32), (0, 4, 32)}
    for x in rows:
        for field in ["model_filename", "model_type", "model_size", "model_n_params",
                      "n_threads", "n_batch", "n_ubatch", "type_k", "type_v", "avg_ns",
                      "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts"]:
            assert field in x, field
        assert x["n_threads"] == 2 and len(x["samples_ts"]) == 2
        n_tokens = x["n_prompt"] + x["n_gen"]
        # avg_ts is the mean of the per-repetition rates, each n_tokens / seconds.
        assert x["avg_ts"] == pytest.approx(sum(x["samples_ts"]) / 2, rel=1e-6)
        for ns, ts in zip(x["samples_ns"], x["samples_ts"]):
            assert ts == pytest.approx(n_tokens * 1e9 / ns, rel=1e-6)


def test_bench_bandwidth_reads_the_yardstick_between_tokens(mnemo, smollm2):
    """--bandwidth: one pass of the 1 GiB yardstick after each 0.2 s of generated tokens and
    after the last one (SmolLM2's 600 tokens take well over 0.6 s on 2 cores, 3 about 10 ms),
    none for a prompt test; the test's bandwidth is the passes' bytes over their time (the
    harmonic mean of the per-pass rates), never above the best pass."""
    r = run(mnemo, "bench", "-m", smollm2, "-t", 2, "-p", 8, "-n", "3,600", "-r", 2,
            "--bandwidth", "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout[r.stdout.index("["):])
    pp = next(x for x in rows if x["n_prompt"] == 8)
    assert "bandwidth_samples" not in pp
    short = next(x for x in rows if x["n_gen"] == 3)
    assert len(short["bandwidth_samples"]) == 2  # one per repetition
    tg = next(x for x in rows if x["n_gen"] == 600)
    samples = tg["bandwidth_samples"]
    # Each repetition ends a run at or after every 0.2 s of tokens, and at its last token.
    run_s = [ns * 1e-9 for ns in tg["samples_ns"]]
    assert 2 * 3 <= len(samples) <= sum(int(s / 0.2) + 1 for s in run_s), (len(samples), run_s)
    assert all(s > 1e8 for s in samples)
    harmonic = len(samples) / sum(1 / s for s in samples)
    assert tg["bandwidth_bytes_per_s"] == pytest.approx(harmonic, rel=1e-9)
    assert tg["bandwidth_best_bytes_per_s"] == pytest.approx(max(samples), rel=1e-12)
    assert tg["read_bytes_per_s"] == pytest.approx(tg["bytes_per_token"] * tg["avg_ts"], rel=1e-9)
    # The token's time split: the matmul calls take part of every token, not all of it (norms,
    # attention and the sampling-free rest take the remainder), and the weights' rate is their
    # bytes (the token's bytes less the few MB of K/V at this depth) over that time.
    assert "matmul_ns_per_token" not in pp
    for x in (short, tg):
        tok_ns = x["avg_ns"] / x["n_gen"]
        assert 0.3 * tok_ns < x["matmul_ns_per_token"] < tok_ns, (x["matmul_ns_per_token"], tok_ns)
        weights = x["weights_read_bytes_per_s"] * x["matmul_ns_per_token"] * 1e-9
        assert 0.9 * x["bytes_per_token"] < weights < x["bytes_per_token"], weights
    md = run(mnemo, "bench", "-m", smollm2, "-t", 2, "-p", 0, "-n", 2, "-r", 1, "--bandwidth")
    assert md.returncode == 0, md.stderr
    assert "of the read bandwidth between its tokens" in md.stdout
    assert "over 1 pass;" in md.stdout
    assert re.search(r"tg2: matmuls [0-9.]+ of [0-9.]+ ms per token \([0-9]+%\), their weights at "
                     r"[0-9.]+ GB/s", md.stdout), md.stdout


@pytest.mark.parametrize("value", ["abc", "32", "2000000", "4096x", "-64"])
def test_bad_prefetch_far_is_ignored_with_a_warning(mnemo, smollm2, value):
    """MNEMO_PREFETCH_FAR outside 64..1048576 bytes (or not a number): one warning naming it,
    then the default distance; generation runs as without it."""
    env = dict(os.environ, MNEMO_PREFETCH_FAR=value)
    r = subprocess.run([str(mnemo), "run", "-m", str(smollm2), "-p", "Hello", "-n", "4", "--temp",
                        "0"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"MNEMO_PREFETCH_FAR={value} is not a byte count") == 1, r.stderr
    plain = run(mnemo, "run", "-m", smollm2, "-p", "Hello", "-n", 4, "--temp", 0)
    assert r.stdout == plain.stdout and "MNEMO_PREFETCH_FAR" not in plain.stderr


def test_good_prefetch_far_is_quiet(mnemo):
    env = dict(os.environ, MNEMO_PREFETCH_FAR="16384")
    r = subprocess.run([str(mnemo), "--version"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0 and "MNEMO_PREFETCH_FAR" not in r.stderr, r.stderr


def test_bench_markdown_table(mnemo, smollm2):
    r = run(mnemo, "bench", "-m", smollm2, "-p", 8, "-n", 2, "-r", 1, "-ctk", "q8_0", "-ctv",
            "q8_0")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert "t/s" in lines[0] and "test" in lines[0]
    assert any("pp8" in l and "q8_0" in l for l in lines)
    assert any("tg2" in l for l in lines)


def test_run_shows_progress_for_a_long_prompt(mnemo, smollm2):
    """A prompt that takes several forward passes (here -ub 64) prints "prompt: done/total"
    after each; the generated text follows the prompt as usual."""
    prompt = " ".join(f"item {i}," for i in range(80))  # ~240 tokens
    r = run(mnemo, "run", "-m", smollm2, "-p", prompt, "-n", 2, "--temp", 0, "-c", 512,
            "-ub", 64)
    assert r.returncode == 0, r.stderr
    steps = [l for l in r.stderr.replace("\r", "\n").splitlines() if l.startswith("prompt: ")]
    assert len(steps) >= 4, r.stderr
    done = [int(l.split()[1].split("/")[0]) for l in steps]
    total = {int(l.split()[1].split("/")[1]) for l in steps}
    assert len(total) == 1 and done == sorted(done) and done[-1] == total.pop()
    assert all(d % 64 == 0 for d in done[:-1])
    assert r.stdout.startswith(prompt)
