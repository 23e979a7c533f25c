"""mnemo serve as a drop-in for llama-server: HTTP conventions (CORS, X-Api-Key, -b without -ub,
error codes and fields, /slots switches and ids), logit_bias in every form, and the response
shapes clients read. Shapes are compared with tests/fixtures/llama_server_shapes.json, recorded
from the peer's llama-server on the same model (tests/fixtures/make_server_shapes.py).
"""
import json
import math
import threading
import time

import pytest
import requests

from helpers.server import Server

KEY = "s3cret"


@pytest.fixture(scope="module")
def shapes(repo_root):
    return json.loads((repo_root / "tests/fixtures/llama_server_shapes.json").read_text())


@pytest.fixture(scope="module")
def srv(binary, model, tmp_path_factory):
    s = Server(binary, model, "-np", 2, "-c", 1024, "--temp", 0, "--metrics", "--api-key", KEY,
               "--slot-save-path", tmp_path_factory.mktemp("slots"))
    yield s
    assert s.alive(), "the server died:\n" + s.log()
    assert s.stop() == 0, s.log()


H = {"X-Api-Key": KEY}


def post(srv, path, body, **kw):
    return requests.post(srv.url + path, json=body, headers=H, timeout=120, **kw)


def sse(r):
    return [json.loads(l[6:]) for l in r.iter_lines() if l.startswith(b"data: {")]


# --- HTTP conventions ---------------------------------------------------------------------------

def test_cors_preflight_and_headers(srv):
    """A page on another origin can call the API: the preflight needs no key and lists what is
    allowed; every answer (errors included) carries the page's origin."""
    origin = "http://app.example:3000"
    r = requests.options(srv.url + "/v1/chat/completions", timeout=10, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code in (200, 204), r.text
    assert r.headers["Access-Control-Allow-Origin"] == origin
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert "authorization" in r.headers["Access-Control-Allow-Headers"].lower()
    r = requests.post(srv.url + "/completion", timeout=60, json={"prompt": "Hi", "n_predict": 1},
                      headers={"Origin": origin, "Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == origin
    r = requests.post(srv.url + "/completion", timeout=60, json={"prompt": "Hi"},
                      headers={"Origin": origin})
    assert r.status_code == 401 and r.headers["Access-Control-Allow-Origin"] == origin
    r = requests.get(srv.url + "/health", headers={"Origin": origin}, timeout=10)
    assert r.headers["Access-Control-Allow-Origin"] == origin
    # No Origin (not a browser): no CORS headers.
    r = requests.get(srv.url + "/health", timeout=10)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_allowed_origins_flag(binary, model):
    s = Server(binary, model, "-np", 1, "-c", 256, "--allowed-origins",
               "http://good.example, http://also.example:8080")
    try:
        for origin in ("http://good.example", "http://also.example:8080"):
            r = requests.options(s.url + "/completion", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"}, timeout=10)
            assert r.status_code in (200, 204) and r.headers["Access-Control-Allow-Origin"] == origin
        r = requests.options(s.url + "/completion", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, timeout=10)
        assert r.status_code == 403
        assert "Access-Control-Allow-Origin" not in r.headers
        r = requests.get(s.url + "/health", headers={"Origin": "http://evil.example"}, timeout=10)
        assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    finally:
        assert s.stop() == 0


def test_api_key_forms(srv):
    assert requests.get(srv.url + "/props", headers={"X-Api-Key": KEY}, timeout=10).ok
    assert requests.get(srv.url + "/props", headers={"Authorization": f"Bearer {KEY}"},
                        timeout=10).ok
    for bad in ({"X-Api-Key": "nope"}, {"Authorization": "Bearer nope"}, {}):
        r = requests.get(srv.url + "/props", headers=bad, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    # Public as in llama-server: health and the model list.
    for path in ("/health", "/v1/health", "/models", "/v1/models"):
        assert requests.get(srv.url + path, timeout=10).status_code == 200, path


def test_batch_size_alone_bounds_the_ubatch(binary, model):
    """-b 32 without -ub starts (n_ubatch clamped to 32, as llama-server) and answers."""
    s = Server(binary, model, "-np", 1, "-c", 512, "-b", 32)
    try:
        props = requests.get(s.url + "/props", timeout=10).json()
        assert props["n_batch"] == 32 and props["n_ubatch"] == 32
        r = requests.post(s.url + "/completion", json={"prompt": "word " * 100, "n_predict": 2},
                          timeout=60)
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0


def test_exceed_context_size_error(srv, shapes):
    for path, body in (("/completion", {"prompt": "word " * 700, "n_predict": 2}),
                       ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "word " * 700}]})):
        r = post(srv, path, body)
        assert r.status_code == shapes["exceed_context.status"] == 400, r.text
        err = r.json()["error"]
        assert sorted(err) == shapes["exceed_context.error"]
        assert err["type"] == shapes["exceed_context.type"]
        assert err["n_ctx"] == 512 and err["n_prompt_tokens"] > 512


def test_slots_switch_fail_on_no_slot_and_ids(binary, model, srv):
    s = Server(binary, model, "-np", 1, "-c", 256, "--no-slots")
    try:
        r = requests.get(s.url + "/slots", timeout=10)
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    finally:
        assert s.stop() == 0
    assert requests.get(srv.url + "/slots?fail_on_no_slot=1", headers=H, timeout=10).ok
    # Both slots busy with streams: fail_on_no_slot answers 503 at once.
    streams = [requests.post(srv.url + "/completion", headers=H, stream=True, timeout=120,
                             json={"prompt": "Tell me a long story.", "n_predict": 400,
                                   "ignore_eos": True, "stream": True, "id_slot": i})
               for i in (0, 1)]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            slots = requests.get(srv.url + "/slots", headers=H, timeout=10).json()
            if all(x["is_processing"] for x in slots):
                break
            time.sleep(0.05)
        r = requests.get(srv.url + "/slots?fail_on_no_slot=1", headers=H, timeout=10)
        assert r.status_code == 503, r.text
    finally:
        for st in streams:
            st.close()
    for bad, code in (("abc", 400), ("-1", 400), ("1x", 400), ("7", 404)):
        r = post(srv, f"/slots/{bad}?action=erase", {})
        assert r.status_code == code, (bad, r.text)


# --- logit_bias ----------------------------------------------------------------------------------

def greedy(srv, path="/completion", **fields):
    body = {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0,
            "cache_prompt": False, "return_tokens": True, "n_probs": 3}
    body.update(fields)
    r = post(srv, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def test_logit_bias_every_form(srv, shapes):
    base = greedy(srv)
    first = base["tokens"][0]
    text = base["completion_probabilities"][0]["token"]
    # Banned: [[id, false]] and OpenAI's map with -100 (on /v1/completions too).
    for bias in ([[first, False]], {str(first): -100}, [[first, -1e6]]):
        r = greedy(srv, logit_bias=bias)
        assert r["tokens"][0] != first, bias
        assert first not in r["tokens"], bias
    r = post(srv, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 2,
                                      "temperature": 0, "logit_bias": {str(first): -100}})
    assert r.status_code == 200 and not r.json()["choices"][0]["text"].startswith(text), r.text
    # Forced: a large bias on a token the model would not pick; by text as well as by id.
    r = greedy(srv, logit_bias=[[1000, 100.0]])
    assert r["tokens"][:4] == [1000] * 4
    r = greedy(srv, logit_bias=[[" Paris", 100.0]])
    paris = requests.post(srv.url + "/tokenize", headers=H, json={"content": " Paris"},
                          timeout=10).json()["tokens"]
    assert r["tokens"][0] in paris
    # Shown in generation_settings as llama-server shows them (a ban's bias is null).
    gs = greedy(srv, logit_bias=[[28, False], [29, 1.5]])["generation_settings"]
    assert gs["logit_bias"] == shapes["generation_settings.logit_bias"]
    # Bad forms are 400s naming the field.
    for bad in ([[1, "x"]], [[10**9, 1.0]], [1, 2], "nope", {"1": 1e9}, {"1": None}):
        r = post(srv, "/completion", {"prompt": "hi", "logit_bias": bad})
        assert r.status_code == 400 and "logit_bias" in r.json()["error"]["message"], (bad, r.text)
    # The log-probabilities reported are those of the model, not of the biased sampler.
    assert math.isclose(greedy(srv, logit_bias=[[1000, 100.0]])["completion_probabilities"][0][
        "top_logprobs"][0]["logprob"], base["completion_probabilities"][0]["logprob"],
        rel_tol=0, abs_tol=1e-6)


# --- response shapes ----------------------------------------------------------------------------

def test_completion_shapes_match_llama_server(srv, shapes):
    r = greedy(srv, n_probs=0, return_tokens=False)
    assert set(shapes["completion"]) <= set(r), set(shapes["completion"]) - set(r)
    assert sorted(r["timings"]) == shapes["completion.timings"]
    assert r["tokens"] == [] and r["prompt"] == "The capital of France is"
    assert r["tokens_cached"] == r["tokens_evaluated"] + r["tokens_predicted"] - 1
    with post(srv, "/completion", {"prompt": "The sky is", "n_predict": 3, "temperature": 0,
                                   "stream": True}, stream=True) as s:
        chunks = sse(s)
    assert set(shapes["completion.stream.delta"]) <= set(chunks[0])
    assert all(isinstance(t, int) for c in chunks[:-1] for t in c["tokens"])
    assert [c["tokens_predicted"] for c in chunks[:-1]] == list(range(1, len(chunks)))
    assert set(shapes["completion.stream.final"]) <= set(chunks[-1])
    assert chunks[-1]["stop"] is True and chunks[-1]["tokens"] == []
    with post(srv, "/completion", {"prompt": "The sky is", "n_predict": 3, "temperature": 0,
                                   "stream": True, "timings_per_token": True}, stream=True) as s:
        chunks = sse(s)
    assert set(shapes["completion.stream.delta.timings_per_token"]) <= set(chunks[0])
    assert chunks[1]["timings"]["predicted_n"] == 2


def test_chat_stream_shapes(srv, shapes):
    with post(srv, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}}, stream=True) as s:
        chunks = sse(s)
    assert chunks[0]["choices"][0]["delta"] == shapes["chat.stream.first.delta"]
    assert set(shapes["chat.stream.usage"]) <= set(chunks[-1])
    with post(srv, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
            "timings_per_token": True}, stream=True) as s:
        chunks = sse(s)
    assert "timings" in chunks[1], chunks[1]


def test_response_fields(srv):
    r = greedy(srv, response_fields=["content", "generation_settings/n_predict",
                                     "timings/prompt_n", "nope"])
    assert sorted(r) == ["content", "generation_settings/n_predict", "timings/prompt_n"]
    assert r["generation_settings/n_predict"] == 4


def test_props_and_metrics_names(srv, shapes):
    props = requests.get(srv.url + "/props", headers=H, timeout=10).json()
    dgs = props["default_generation_settings"]
    assert set(shapes["props.default_generation_settings"]) <= set(dgs)
    assert dgs["n_ctx"] == 512 and dgs["params"]["temperature"] == 0
    text = requests.get(srv.url + "/metrics", headers=H, timeout=10).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            values[k] = float(v)
    for name in ("prompt_tokens_total", "tokens_predicted_total", "prompt_seconds_total",
                 "requests_processing", "requests_deferred"):
        assert values["llamacpp:" + name] == values["mnemo_" + name], name
    assert values["llamacpp:n_decode_total"] == values["mnemo_decode_steps_total"]
    assert values["llamacpp:tokens_predicted_total"] > 0


# --- several completions per request ------------------------------------------------------------

LONG = ("You are a careful assistant. Answer in one short sentence, and never use more words "
        "than needed. Question: what is the colour of the sky on a clear day?")


def test_n_choices_share_the_prompt(srv):
    """n = 3 on chat: three choices, each as a single request would answer (greedy), and the
    copies reuse the first choice's prompt from its slot instead of reading it again."""
    msgs = [{"role": "user", "content": LONG}]
    one = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 6,
                                             "temperature": 0, "cache_prompt": False}).json()
    r = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0,
                                           "n": 3, "cache_prompt": True})
    assert r.status_code == 200, r.text
    j = r.json()
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    want = one["choices"][0]["message"]["content"]
    assert all(c["message"]["content"] == want for c in j["choices"]), j["choices"]
    n_prompt = one["usage"]["prompt_tokens"]
    assert j["usage"]["prompt_tokens"] == n_prompt  # counted once
    assert j["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    # Sampled with a seed: choices differ from each other and repeat exactly.
    body = {"messages": msgs, "max_tokens": 12, "temperature": 1.5, "n": 3, "seed": 7}
    a, b = post(srv, "/v1/chat/completions", body).json(), post(srv, "/v1/chat/completions",
                                                                 body).json()
    texts = [c["message"]["content"] for c in a["choices"]]
    assert texts == [c["message"]["content"] for c in b["choices"]]
    assert len(set(texts)) > 1, texts


def test_copies_reuse_the_prompt_memory(srv):
    """n = 2: the second choice's prompt comes from the first choice's slot (all but its last
    token, which is always evaluated), counted in mnemo_prompt_tokens_cached_total."""
    before = requests.get(srv.url + "/metrics", headers=H, timeout=10).text
    def cached(text):
        return sum(float(l.split()[1]) for l in text.splitlines()
                   if l.startswith("mnemo_prompt_tokens_cached_total"))
    r = post(srv, "/v1/completions", {"prompt": LONG, "max_tokens": 4, "temperature": 0, "n": 2})
    assert r.status_code == 200, r.text
    after = requests.get(srv.url + "/metrics", headers=H, timeout=10).text
    n_prompt = r.json()["usage"]["prompt_tokens"]
    assert n_prompt > 16  # copies share prompts of at least 16 tokens
    assert cached(after) - cached(before) >= n_prompt - 1, (n_prompt, cached(before), cached(after))


def test_several_prompts(srv):
    prompts = ["The capital of France is", [504, 3458, 282], "Once upon a time"]
    singles = [greedy(srv, prompt=p, n_probs=0) for p in prompts]
    r = post(srv, "/completion", {"prompt": prompts, "n_predict": 4, "temperature": 0,
                                  "cache_prompt": False, "return_tokens": True})
    assert r.status_code == 200, r.text
    arr = r.json()
    assert isinstance(arr, list) and [x["index"] for x in arr] == [0, 1, 2]
    assert [x["tokens"] for x in arr] == [s["tokens"] for s in singles]
    with post(srv, "/completion", {"prompt": prompts, "n_predict": 4, "temperature": 0,
                                   "stream": True}, stream=True) as s:
        chunks = sse(s)
    for i, single in enumerate(singles):
        mine = [c for c in chunks if c["index"] == i]
        assert "".join(c["content"] for c in mine) == single["content"]
        assert mine[-1]["stop"] is True
    # OpenAI's list of prompts, streamed with usage.
    with post(srv, "/v1/completions", {"prompt": ["Hello", "The sky is"], "max_tokens": 3,
                                       "temperature": 0, "stream": True,
                                       "stream_options": {"include_usage": True}},
              stream=True) as s:
        body = s.content.decode()
    assert body.rstrip().endswith("data: [DONE]")
    chunks = [json.loads(l[6:]) for l in body.splitlines() if l.startswith("data: {")]
    assert {c["choices"][0]["index"] for c in chunks if c["choices"]} == {0, 1}
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    # Limits: more than 64 completions, or n out of range, is a 400.
    r = post(srv, "/v1/completions", {"prompt": ["a"] * 10, "n": 10})
    assert r.status_code == 400 and "at most 64" in r.text
    r = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                           "n": 0})
    assert r.status_code == 400


def test_two_trailing_assistant_messages_are_refused(srv):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"},
            {"role": "assistant", "content": "lo"}]
    r = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
    assert r.status_code == 400 and "two assistant messages" in r.text, r.text
    r = post(srv, "/v1/chat/completions", {"messages": msgs[:2], "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_apply_template_and_chat_template_flag(srv, binary, model):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = post(srv, "/apply-template", {"messages": msgs})
    assert r.status_code == 200, r.text
    text = r.json()["prompt"]
    # SmolLM2's template is ChatML: the text the chat endpoint tokenizes.
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n"), text
    toks = requests.post(srv.url + "/tokenize", headers=H, timeout=10,
                         json={"content": text, "add_special": True,
                               "parse_special": True}).json()["tokens"]
    chat = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == len(toks)
    assert post(srv, "/apply-template", {"messages": "x"}).status_code == 400
    s = Server(binary, model, "-np", 1, "-c", 256, "--no-jinja", "--chat-template", "llama3")
    try:
        r = requests.post(s.url + "/apply-template", json={"messages": msgs}, timeout=10)
        assert r.json()["prompt"].startswith("<|start_header_id|>system<|end_header_id|>"), r.text
        assert requests.get(s.url + "/props", timeout=10).json()["chat_template"] == "llama3"
    finally:
        assert s.stop() == 0
    import subprocess
    bad = subprocess.run([str(binary), "serve", "-m", str(model), "--port", "0",
                          "--no-jinja", "--chat-template", "nope"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "--chat-template" in bad.stderr, bad.stderr


def test_post_sampling_probs(srv):
    """post_sampling_probs: "prob" / "top_probs" of the distribution the sampler drew from.
    Greedy: the pick alone at 1. With every truncation off at temperature 1 it is the model's
    softmax, so it equals exp of the plain log-probabilities of the same request."""
    base = {"prompt": "The sky is", "n_predict": 1, "n_probs": 3, "cache_prompt": False}
    g = post(srv, "/completion", dict(base, temperature=0, post_sampling_probs=True)).json()
    e = g["completion_probabilities"][0]
    assert "logprob" not in e and "top_logprobs" not in e
    # Greedy: the n_probs best with their softmax over those n (llama.cpp's greedy sampling
    # with n_probs: a top-k of n_probs, then a softmax), the pick first.
    ref = post(srv, "/completion", dict(base, temperature=0)).json()[
        "completion_probabilities"][0]["top_logprobs"]
    assert [t["id"] for t in e["top_probs"]] == [t["id"] for t in ref] and len(ref) == 3
    assert e["top_probs"][0]["id"] == e["id"] and e["prob"] == e["top_probs"][0]["prob"]
    z = sum(math.exp(t["logprob"]) for t in ref)
    for a, b in zip(e["top_probs"], ref):
        assert math.isclose(a["prob"], math.exp(b["logprob"]) / z, rel_tol=1e-4), (a, b)
    free = dict(base, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)
    plain = post(srv, "/completion", free).json()["completion_probabilities"][0]
    post_ = post(srv, "/completion", dict(free, post_sampling_probs=True)).json()[
        "completion_probabilities"][0]
    assert post_["id"] == plain["id"]
    assert [t["id"] for t in post_["top_probs"]] == [t["id"] for t in plain["top_logprobs"]]
    # Float softmax vs double log-softmax: at most 1.0e-6 relative measured (AMD Zen 4 under
    # AVX3, AVX2 and SSE4, three prompts, top 10); 1e-4 still tells another distribution apart.
    for a, b in zip(post_["top_probs"], plain["top_logprobs"]):
        assert math.isclose(a["prob"], math.exp(b["logprob"]), rel_tol=1e-4), (a, b)
    # top_k 2: only two tokens keep probability, renormalized.
    k2 = post(srv, "/completion", dict(free, top_k=2, post_sampling_probs=True)).json()[
        "completion_probabilities"][0]
    assert len(k2["top_probs"]) == 2
    assert math.isclose(sum(t["prob"] for t in k2["top_probs"]), 1.0, rel_tol=1e-5)


def test_return_progress(binary, model, shapes):
    """return_progress: chunks while the prompt is read, from 0 to all of it, in llama-server's
    shape (one per prompt chunk: -b 64 makes several)."""
    s = Server(binary, model, "-np", 1, "-c", 1024, "-b", 64)
    try:
        with requests.post(s.url + "/completion", stream=True, timeout=120, json={
                "prompt": "word " * 300, "n_predict": 1, "stream": True,
                "return_progress": True, "cache_prompt": False}) as r:
            chunks = sse(r)
        progress = [c for c in chunks if "prompt_progress" in c]
        assert set(shapes["completion.stream.progress"]) <= set(progress[-1])
        assert sorted(progress[-1]["prompt_progress"]) == shapes["prompt_progress"]
        done = [c["prompt_progress"]["processed"] for c in progress]
        total = progress[0]["prompt_progress"]["total"]
        assert done[0] == 0 and done[-1] == total and done == sorted(done) and len(done) >= 5
        assert chunks.index(progress[-1]) < len(chunks) - 1  # text comes after
        with requests.post(s.url + "/v1/chat/completions", stream=True, timeout=120, json={
                "messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 1,
                "stream": True, "return_progress": True}) as r:
            chunks = sse(r)
        assert any("prompt_progress" in c for c in chunks)
        # A cached prefix counts as processed (llama-server: the first event has processed ==
        # cache, the last processed == total).
        requests.post(s.url + "/completion", timeout=120, json={
            "prompt": "word " * 300, "n_predict": 1}).raise_for_status()
        with requests.post(s.url + "/completion", stream=True, timeout=120, json={
                "prompt": "word " * 300 + "and more words here", "n_predict": 1,
                "stream": True, "return_progress": True}) as r:
            progress = [c["prompt_progress"] for c in sse(r) if "prompt_progress" in c]
        assert progress[0]["cache"] >= 290 and progress[0]["processed"] == progress[0]["cache"]
        assert progress[-1]["processed"] == progress[-1]["total"] > progress[0]["cache"]
        # Without the flag: no progress chunks.
        with requests.post(s.url + "/completion", stream=True, timeout=120, json={
                "prompt": "word " * 300, "n_predict": 1, "stream": True}) as r:
            assert not any("prompt_progress" in c for c in sse(r))
    finally:
        assert s.stop() == 0
