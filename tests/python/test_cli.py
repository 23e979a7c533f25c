"""`mnemo run` and `mnemo bench` as a user calls them: llama.cpp's flag names,
streamed text, the timing lines, llama-bench's JSON fields, repacking on and off, and clear
errors (exit status 1 or 2, a message naming the problem, never a crash) for bad input.
"""
import json
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
