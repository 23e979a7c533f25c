"""Speculative decoding (--spec-type ngram-simple, -md / --model-draft) as a user runs it: the
output is byte-identical to plain decoding, greedy and seeded, in `mnemo run` and in the server
with several slots batched together, on SmolLM2 and on the tiny recurrent and hybrid models
(whose rejected drafts roll back through the per-row states the memory keeps).

The reference is the same binary without speculation: mnemo's logits do not depend on how rows
are batched (docs/numerics.md), so any difference is a speculation bug (a wrong rollback, a
sampler that saw other logits, a draft row that leaked into the output or the prompt cache).
Each case also checks that drafts were made and that some were rejected where the workload
makes that likely, so a test cannot pass by never speculating.
"""
import hashlib
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from helpers.paths import GEMMA3
from helpers.server import Server, metric, stop
from helpers.tiny_models import make_tiny_model

# The exactness tests run again under every SIMD target below the CPU's best (`kernels`); the
# Gemma 3 ones, long by nature (past a 512-token window), run once.

REPEAT = ("Here is a list: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry, "
          "apple, banana")
CODE = '''def area(w, h):
    return w * h

def perimeter(w, h):
    return 2 * (w + h)

Rewrite the functions above with type hints:
'''


def run(binary, model, prompt, *args, n=64):
    r = subprocess.run([str(binary), "run", "-m", str(model), "-p", prompt, "-n", str(n), "-t",
                        "2", *map(str, args)], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr.decode()


def drafted(stderr):
    """(draft_n, draft_n_accepted) from `mnemo run`'s summary line."""
    for line in stderr.splitlines():
        if "speculative: draft_n" in line:
            f = line.split()
            return int(f[f.index("draft_n") + 1]), int(f[f.index("draft_n_accepted") + 1])
    raise AssertionError("no speculative summary:\n" + stderr)


@pytest.mark.kernels
@pytest.mark.parametrize("sampling", [("--temp", 0), ("--temp", 0.9, "-s", 42)],
                         ids=["greedy", "seeded"])
@pytest.mark.parametrize("prompt", [REPEAT, CODE], ids=["repeat", "code"])
def test_run_ngram_and_draft_model_are_byte_identical(binary, smollm2_model, prompt, sampling):
    plain, _ = run(binary, smollm2_model, prompt, *sampling)
    ngram, err = run(binary, smollm2_model, prompt, *sampling, "--spec-type", "ngram-simple")
    assert ngram == plain
    assert drafted(err)[0] > 0
    # SmolLM2 drafting for itself: greedy, its drafts are the target's picks (accepted);
    # sampled, the target's picks may all differ from the greedy drafts (seen with AVX2's
    # rounding), so only the drafting is required there (--draft-p-min 0 keeps it drafting).
    own, err = run(binary, smollm2_model, prompt, *sampling, "-md", smollm2_model,
                   "--draft-max", 5, "--draft-p-min", 0)
    assert own == plain
    n, acc = drafted(err)
    assert n > 0
    if sampling[1] == 0:
        assert acc > 0
    # A draft head of 64 ids (--draft-vocab): the draft scores those and the sequence's tokens
    # (gathered rows of the output matrix); still exact, and its greedy picks still hold where
    # the target repeats tokens of the prompt.
    head, err = run(binary, smollm2_model, prompt, *sampling, "-md", smollm2_model,
                    "--draft-max", 5, "--draft-p-min", 0, "--draft-vocab", 64)
    assert head == plain
    n, acc = drafted(err)
    assert n > 0
    if sampling[1] == 0:
        assert acc > 0


def test_run_sliding_window_past_the_window_is_byte_identical(binary, models_dir):
    """Gemma 3 (sliding window of 512 on five layers in six): 600 generated tokens with half the
    drafted tokens rejected, so rows are rolled back after the window's oldest cells were
    reused. The cache's reuse rule (a cell is reused only when masked as seen from the
    sequence's next position before the batch) keeps every window a rollback returns to."""
    gemma = models_dir / GEMMA3
    if not gemma.exists():
        pytest.skip(f"{gemma} missing: run scripts/fetch-model")
    prompt = "Write a very long story about a dragon and a knight, with many chapters."
    args = ["--chat", "--temp", 0, "-c", 2048]
    plain, _ = run(binary, gemma, prompt, *args, n=600)
    spec, err = run(binary, gemma, prompt, *args, "--spec-type", "ngram-simple",
                    "--spec-ngram-size-n", 1, n=600)
    assert spec == plain
    n, acc = drafted(err)
    assert n > acc > 0


def self_draft(model):
    """Draft arguments under which some drafts hold and some do not, whatever the SIMD target:
    the target drafts for itself but scores only ids below 300 of its 512 and the sequence's
    tokens, so a draft agrees exactly when the target's pick is among those (a random-weight
    model's answers hardly repeat, so prompt lookup alone may find none that hold)."""
    return ["-md", model, "--draft-p-min", 0, "--draft-vocab", 300]


@pytest.fixture(scope="module")
def tiny(build_dir, tmp_path_factory):
    """Tiny models: {arch: path} with seed 11 (targets) and seed 12 (drafts, which mostly
    disagree with the targets, so most drafts are rolled back)."""
    d = tmp_path_factory.mktemp("spec")
    out = {}
    for arch in ["mamba2", "granitehybrid", "qwen35"]:
        out[arch] = make_tiny_model(build_dir, d / f"{arch}.gguf", arch, "--seed", 11)
        out[arch + "-draft"] = make_tiny_model(build_dir, d / f"{arch}-d.gguf", arch, "--seed", 12)
    return out


@pytest.mark.kernels
@pytest.mark.parametrize("arch", ["mamba2", "granitehybrid", "qwen35"])
def test_run_recurrent_rollback_is_exact(binary, tiny, arch):
    prompt = "a b c d e f g a b c d e f g a b c d e f g a b c"
    plain, _ = run(binary, tiny[arch], prompt, "--temp", 0, "-c", 512, n=96)
    for args in (["--spec-type", "ngram-simple"],
                 ["-md", tiny[arch + "-draft"], "--draft-p-min", 0],
                 ["-md", tiny["qwen35-draft"], "--draft-p-min", 0, "--ubatch-size", 3,
                  "--draft-vocab", 16],
                 self_draft(tiny[arch])):
        got, err = run(binary, tiny[arch], prompt, "--temp", 0, "-c", 512, *args, n=96)
        assert got == plain, args
        n, acc = drafted(err)
        assert n > acc, f"{args}: every draft was accepted, nothing rolled back ({n}, {acc})"
        if args[0] == "-md" and args[1] == tiny[arch]:
            assert acc > 0, f"{args}: no draft accepted, no accepted row kept ({n}, {acc})"


def complete(srv, prompt, n=48, **kw):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True, **kw}
    r = requests.post(f"{srv.url}/completion", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def prompts_for(vocab_ids):
    """Four requests: repetitive token-id prompts (drafts found) and a plain one."""
    rng = random.Random(3)
    out = []
    for k in range(4):
        pat = [rng.randrange(3, vocab_ids) for _ in range(5 + k)]
        out.append(pat * 6 if k < 3 else [rng.randrange(3, vocab_ids) for _ in range(30)])
    return out


def four_at_once(srv, prompts, **kw):
    with ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(lambda p: complete(srv, p, **kw), prompts))


@pytest.mark.kernels
@pytest.mark.parametrize("arch", ["smollm2", "smollm2-kvu", "granitehybrid", "qwen35"])
def test_server_slots_batched_with_drafts_equal_plain(binary, tiny, smollm2_model, arch):
    """Four slots generate at once, their pending tokens and drafts in the same ubatches; each
    answer equals a plain server's, and a follow-up turn finds as much of its prompt cached as
    after plain decoding (no drafted row stays in a slot's memory)."""
    prompts = prompts_for(500)
    common = ["--parallel", 4, "-c", 2048]
    if arch == "smollm2-kvu":  # one unified stream: drafts take cells the slots share
        common = ["--parallel", 4, "-c", 256, "-kvu"]  # full: fit_step drops drafts, preempts
    model = smollm2_model if arch.startswith("smollm2") else tiny[arch]
    plain = Server(binary, model, *common, threads=1, start_timeout=60)
    # The tiny qwen35's answers to these prompts hardly repeat (0-2 of about 85 prompt-lookup
    # drafts held, over seven seeds and three SIMD targets): it drafts for itself as well.
    drafts = self_draft(model) if arch == "qwen35" else []
    spec = Server(binary, model, *common, "--spec-type", "ngram-simple", "--draft-max", 6,
                  *drafts, "--metrics", threads=1, start_timeout=60)
    try:
        # Random-weight models repeat themselves only after a while: longer answers there.
        n = 48 if arch.startswith("smollm2") else 96
        want = four_at_once(plain, prompts, n=n)
        got = four_at_once(spec, prompts, n=n)
        drafted_n = accepted_n = 0
        for w, g in zip(want, got):
            assert g["tokens"] == w["tokens"]
            assert g["content"] == w["content"]
            drafted_n += g["timings"].get("draft_n", 0)
            accepted_n += g["timings"].get("draft_n_accepted", 0)
            assert "draft_n" not in w["timings"]
        assert drafted_n > accepted_n > 0
        props = requests.get(spec.url + "/props", timeout=10).json()
        params = props["default_generation_settings"]["params"]
        types = "none,ngram-simple" + (",draft-simple" if drafts else "")
        assert params["speculative.types"] == types  # as llama-server's
        assert params["speculative.n_max"] == 6
        assert metric(spec, "draft_tokens_total") == drafted_n
        assert metric(spec, "draft_tokens_accepted_total") == accepted_n
        # The next turn: the prompt cache holds exactly what plain decoding left.
        nxt = [p + w["tokens"] + [7, 8, 9] for p, w in zip(prompts, want)]
        w2 = four_at_once(plain, nxt, n=8)
        g2 = four_at_once(spec, nxt, n=8)
        for a, b in zip(w2, g2):
            assert b["tokens"] == a["tokens"]
            # (A full unified cache reclaims finished slots' cells in an order timing decides,
            # so what the next turn finds there differs from run to run.)
            if arch != "smollm2-kvu":
                assert b["timings"]["cache_n"] == a["timings"]["cache_n"]
        stop(spec)
        stop(plain)
    finally:
        spec.stop()
        plain.stop()


def test_server_draft_model_stop_strings_and_grammar(binary, smollm2_model):
    """SmolLM2 drafting for itself in the server: chat answers, a stop string met inside an
    accepted draft, a JSON schema (the grammar advances over accepted drafts) and seeded
    sampling answer as a plain server does."""
    plain = Server(binary, smollm2_model, "--parallel", 2, threads=2)
    spec = Server(binary, smollm2_model, "--parallel", 2, "-md", smollm2_model, "--draft-max", 8,
                  "--spec-type", "ngram-simple", threads=2)
    try:
        cases = [
            dict(prompt=REPEAT, n_predict=60),
            dict(prompt=REPEAT, n_predict=60, stop=["cherry, apple, banana"]),
            dict(prompt="A JSON object describing a cat: ", n_predict=60,
                 json_schema={"type": "object", "properties": {"name": {"type": "string"},
                                                               "age": {"type": "integer"}},
                              "required": ["name", "age"]}),
            dict(prompt=CODE, n_predict=60, temperature=0.8, seed=7),
        ]
        for body in cases:
            body = {"temperature": 0, **body}
            w = requests.post(plain.url + "/completion", json=body, timeout=300).json()
            g = requests.post(spec.url + "/completion", json=body, timeout=300).json()
            assert hashlib.sha256(g["content"].encode()).hexdigest() == \
                hashlib.sha256(w["content"].encode()).hexdigest(), body
            assert g.get("stopping_word", "") == w.get("stopping_word", "")
            assert g["timings"]["predicted_n"] == w["timings"]["predicted_n"]
        stop(spec)
        stop(plain)
    finally:
        spec.stop()
        plain.stop()


def test_server_draft_head_restarts_its_scored_set(binary, smollm2_model):
    """A prompt holding more distinct ids above the draft head (--draft-vocab 64) than the draft
    model keeps scored (4,096 extra ids; 4,400 here): the set restarts from the history's
    most recent ids, and the answer still equals a plain server's, with drafts accepted."""
    prompt = list(range(1000, 5400)) + list(range(2000, 2008)) * 4
    plain = Server(binary, smollm2_model, "-c", 8192, "--parallel", 1, threads=2, start_timeout=60)
    spec = Server(binary, smollm2_model, "-c", 8192, "--parallel", 1, "-md", smollm2_model,
                  "--draft-max", 5, "--draft-p-min", 0, "--draft-vocab", 64, threads=2,
                  start_timeout=60)
    try:
        w = complete(plain, prompt, n=32)
        g = complete(spec, prompt, n=32)
        assert g["tokens"] == w["tokens"]
        assert g["content"] == w["content"]
        assert g["timings"]["draft_n"] >= g["timings"]["draft_n_accepted"] > 0
        stop(spec)
        stop(plain)
    finally:
        spec.stop()
        plain.stop()


def test_server_sliding_window_past_the_window(binary, models_dir):
    """Gemma 3 in the server past its 512-token window: two requests at once (the model then
    does not draft: a verify batch split among ubatches could not be rolled back exactly), then
    one alone (it drafts); every answer equals a plain server's."""
    gemma = models_dir / GEMMA3
    if not gemma.exists():
        pytest.skip(f"{gemma} missing: run scripts/fetch-model")
    prompts = ["Write a very long story about a dragon and a knight, with many chapters.",
               "Write a very long story about a ship lost at sea, with many chapters."]
    common = ["--parallel", 2, "-c", 4096]
    plain = Server(binary, gemma, *common, threads=2)
    spec = Server(binary, gemma, *common, "--spec-type", "ngram-simple",
                  "--spec-ngram-size-n", 1, threads=2)
    try:
        def ask(srv, p):
            body = {"messages": [{"role": "user", "content": p}], "max_tokens": 560,
                    "temperature": 0}
            r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=600)
            assert r.status_code == 200, r.text
            return r.json()
        with ThreadPoolExecutor(2) as ex:
            want = list(ex.map(lambda p: ask(plain, p), prompts))
            got = list(ex.map(lambda p: ask(spec, p), prompts))
        alone = ask(spec, prompts[0] + " Make it sad.")
        alone_plain = ask(plain, prompts[0] + " Make it sad.")
        for w, g in zip(want + [alone_plain], got + [alone]):
            assert g["choices"][0]["message"]["content"] == w["choices"][0]["message"]["content"]
        assert alone["timings"].get("draft_n", 0) > alone["timings"].get("draft_n_accepted", 0)
        stop(spec)
        stop(plain)
    finally:
        spec.stop()
        plain.stop()


def test_bad_flags_are_refused(binary, smollm2_model, tiny):
    for args, text in [(["--spec-type", "magic"], "--spec-type"),
                       (["--spec-type", "ngram-simple", "--draft-max", 0], "--draft-max"),
                       (["-md", tiny["mamba2"]], "vocabulary")]:
        r = subprocess.run([str(binary), "run", "-m", str(smollm2_model), "-p", "hi", "-n", "4",
                            *map(str, args)], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and text in r.stderr, r.stderr
