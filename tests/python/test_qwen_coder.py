"""Qwen2.5-Coder-Instruct 0.5B and 1.5B (qwen2, Q4_K_M), the real models with a tool-calling
template, against llama-server on the same files (tests/fixtures/agent_qwen_coder.json, made by
tests/fixtures/make_agent_fixtures.py with the peer):

- the chat template (ChatML with Qwen 2.5's tools section, an assistant tool call and its
  result) renders byte for byte as llama-server's /apply-template renders it, and tokenizes to
  the same ids;
- the greedy continuation of each prompt is llama-server's, up to the first place where the two
  engines' rounding may pick differently: a near-tie by our own log-probabilities (the rule of
  test_server.py's test_greedy_output_matches_llama_cpp).
"""
import json

import pytest
import requests

from helpers.paths import FIXTURES_DIR
from helpers.server import Server, stop

FIXTURE = json.loads((FIXTURES_DIR / "agent_qwen_coder.json").read_text())
NEAR_TIE_NATS = 0.5


# Both models under the CPU's best SIMD target; the 0.5B also under every target below it
# (`kernels`, scripts/test's SIMD loop), which keeps that loop's time bounded.
@pytest.fixture(scope="module", params=[
    pytest.param(tag, marks=[pytest.mark.kernels] if tag == "0.5b" else [])
    for tag in sorted(FIXTURE["models"])])
def served(request, models_dir):
    entry = FIXTURE["models"][request.param]
    path = models_dir / entry["file"]
    if not path.exists():
        pytest.skip(f"{path} missing: run scripts/fetch-model")
    binary = request.getfixturevalue("binary")
    srv = Server(binary, path, "-c", 4096, "-np", 1)
    yield srv, entry["cases"]
    stop(srv)


def test_template_renders_as_llama_server(served):
    srv, cases = served
    for case in cases:
        body = {"messages": case["messages"], **({"tools": case["tools"]} if "tools" in case
                                                  else {})}
        r = requests.post(srv.url + "/apply-template", json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["prompt"] == case["prompt"], case["name"]
        ids = requests.post(srv.url + "/tokenize", json={
            "content": case["prompt"], "add_special": True, "parse_special": True},
            timeout=60).json()["tokens"]
        assert ids == case["prompt_tokens"], case["name"]


def test_greedy_output_matches_llama_server(served):
    srv, cases = served
    for case in cases:
        want = case["generated"]
        got = requests.post(srv.url + "/completion", json={
            "prompt": case["prompt_tokens"], "n_predict": len(want), "temperature": 0,
            "cache_prompt": False, "ignore_eos": True, "return_tokens": True, "n_probs": 5},
            timeout=300).json()
        toks = got["tokens"]
        i = next((k for k in range(len(want)) if toks[k] != want[k]), None)
        if i is None:
            continue
        print(case["name"], "parts from llama-server at token", i)
        probs = got["completion_probabilities"][i]
        top = {t["id"]: t["logprob"] for t in probs["top_logprobs"]}
        assert want[i] in top and probs["logprob"] - top[want[i]] < NEAR_TIE_NATS, (
            case["name"], i, top)
