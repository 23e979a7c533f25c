"""llama-server behaviours clients rely on, against the peer's answers on the same models
(tests/fixtures/llama_server_behaviours.json, made by tests/fixtures/make_server_behaviours.py):
the disabled-endpoint texts and --no-webui, the llamacpp:* metrics, /slots entries, restoring a
missing file, the too-long-prompt error and --context-shift truncation, prompt objects and media
parts, and /infill (fill-in-the-middle) on Qwen2.5-Coder-0.5B.
"""
import json

import pytest
import requests

from helpers.paths import FIXTURES_DIR
from helpers.server import Server, stop

PEER = json.loads((FIXTURES_DIR / "llama_server_behaviours.json").read_text())
NEAR_TIE_NATS = 0.5


def post(srv, path, body):
    return requests.post(srv.url + path, json=body, timeout=120)


def error_of(r):
    return {"status": r.status_code, "error": r.json()["error"]}


@pytest.fixture(scope="module")
def smol(binary, model):
    srv = Server(binary, model, "-c", 2048, "-np", 2, "--metrics")
    yield srv
    stop(srv)


def test_disabled_endpoints_and_webui(binary, model, tmp_path):
    srv = Server(binary, model, "-c", 2048, "-np", 2, "--no-slots", "--no-webui",
                 "--slot-save-path", tmp_path)
    try:
        assert error_of(requests.get(srv.url + "/slots", timeout=30)) == PEER["slots.disabled"]
        assert error_of(requests.get(srv.url + "/metrics", timeout=30)) == \
            PEER["metrics.disabled"]
        assert requests.get(srv.url + "/", timeout=30).status_code == \
            PEER["webui.disabled.status"]
        r = post(srv, "/slots/0?action=restore", {"filename": "missing.bin"})
        assert r.status_code == PEER["restore_missing.status"], r.text
        # The API stays up without the page.
        assert post(srv, "/completion", {"prompt": "Hi", "n_predict": 1}).ok
    finally:
        stop(srv)
    srv = Server(binary, model, "-c", 512, "-np", 1)
    try:
        r = post(srv, "/slots/0?action=save", {"filename": "x.bin"})
        assert error_of(r) == PEER["slot_action.disabled"]
        assert requests.get(srv.url + "/", timeout=30).status_code == 200  # the page by default
    finally:
        stop(srv)


def test_metrics_have_llama_servers_names(smol):
    post(smol, "/completion", {"prompt": "The sky is", "n_predict": 3, "temperature": 0})
    lines = requests.get(smol.url + "/metrics", timeout=30).text.splitlines()
    got, values = [], {}
    for i, line in enumerate(lines):
        if line.startswith("# HELP llamacpp:"):
            name, help_ = line[len("# HELP "):].split(" ", 1)
            got.append([name, lines[i + 1].split(" ")[3], help_])
        elif line.startswith("llamacpp:"):
            values[line.split(" ")[0]] = float(line.split(" ")[1])
    assert got == PEER["metrics.llamacpp"]
    assert values["llamacpp:n_tokens_max"] >= 3 + 3
    assert values["llamacpp:n_busy_slots_per_decode"] >= 1
    assert values["llamacpp:spec_decode_num_drafts_total"] == 0


def test_slots_entries_carry_llama_servers_fields(smol):
    post(smol, "/completion", {"prompt": "The sky is", "n_predict": 2, "temperature": 0.5,
                               "top_k": 7, "id_slot": 1})
    slot = requests.get(smol.url + "/slots", timeout=30).json()[1]
    assert set(PEER["slots.keys"]) <= set(slot)
    assert sorted(slot["next_token"][0]) == PEER["slots.next_token.keys"]
    # params: the settings of the slot's last request.
    assert slot["params"]["top_k"] == 7 and slot["params"]["temperature"] == 0.5
    assert slot["params"]["n_predict"] == 2 and not slot["is_processing"]
    assert slot["next_token"][0]["n_remain"] == -1


def test_too_long_prompt_error_is_llama_servers(smol):
    r = post(smol, "/completion", {"prompt": "word " * 1500, "n_predict": 2})
    assert error_of(r) == PEER["exceed_context"]


def test_context_shift_truncates_a_long_prompt(binary, model):
    """--context-shift: a prompt longer than the slot keeps n_keep tokens and drops whole blocks
    of (n_ctx - n_keep) / 2 tokens after them (llama-server's truncation); the answer says so and
    equals the answer to the truncated prompt sent as it is."""
    srv = Server(binary, model, "-c", 256, "-np", 1, "--context-shift")
    try:
        text = " ".join(f"w{i}" for i in range(300))
        ids = post(srv, "/tokenize", {"content": text}).json()["tokens"]
        assert len(ids) > 256
        for n_keep in (0, 10):
            r = post(srv, "/completion", {"prompt": text, "n_predict": 4, "temperature": 0,
                                          "n_keep": n_keep, "cache_prompt": False})
            assert r.status_code == 200, r.text
            out = r.json()
            keep = min(n_keep, 256 - 4)
            block = (256 - keep) // 2
            erased = (len(ids) - keep - block) // block
            want = ids[:keep] + ids[keep + erased * block:]
            assert out["truncated"] is True and out["tokens_evaluated"] == len(want) < 256
            ref = post(srv, "/completion", {"prompt": want, "n_predict": 4, "temperature": 0,
                                            "cache_prompt": False}).json()
            assert out["content"] == ref["content"] and ref["truncated"] is False
    finally:
        stop(srv)


def test_media_path_is_accepted_and_media_refused(binary, model, tmp_path):
    """--media-path (llama-server's) starts the server with a note; a file:// image part is
    refused with the no-vision-model error, not a parse error."""
    srv = Server(binary, model, "-c", 512, "-np", 1, "--media-path", tmp_path)
    try:
        assert any("--media-path is ignored" in l for l in srv.lines), srv.log()
        r = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file://cat.png"}}]}], "max_tokens": 2})
        assert r.status_code == 400 and "no vision" in r.json()["error"]["message"]
    finally:
        stop(srv)


def test_prompt_objects_and_media(smol):
    r = post(smol, "/completion", {"prompt": {"prompt_string": "The sky is"}, "n_predict": 2,
                                   "temperature": 0})
    assert r.status_code == 200 and r.json()["content"] == PEER["prompt_object.content"]
    r = post(smol, "/completion", {"prompt": ["The sky is", {"prompt_string": "The sky is"}],
                                   "n_predict": 2, "temperature": 0})
    assert [c["content"] for c in r.json()] == PEER["prompt_list.contents"]
    r = post(smol, "/completion", {"prompt": {"prompt_string": "<__media__> what",
                                              "multimodal_data": ["aGVsbG8="]}, "n_predict": 2})
    assert r.status_code == PEER["multimodal_prompt.status"]
    assert "no vision" in r.json()["error"]["message"]
    r = post(smol, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}],
        "max_tokens": 2})
    assert r.status_code == 400 and "no vision" in r.json()["error"]["message"]
    assert "image_url" in r.json()["error"]["message"]


def test_infill_without_fim_tokens_is_501(smol):
    r = post(smol, "/infill", {"input_prefix": "x", "input_suffix": "y", "n_predict": 2})
    assert error_of(r) == PEER["infill.no_fim"]


def test_infill_matches_llama_server(binary, models_dir):
    path = models_dir / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not path.exists():
        pytest.skip(f"{path} missing: run scripts/fetch-model")
    srv = Server(binary, path, "-c", 4096, "-np", 1)
    try:
        for case in PEER["infill.qwen_coder_05b"]:
            r = post(srv, "/infill", dict(case["request"], temperature=0, return_tokens=True,
                                          n_probs=2, cache_prompt=False))
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["prompt"] == case["prompt"]
            assert out["tokens_evaluated"] == case["tokens_evaluated"]
            # The greedy output is the peer's up to the first near-tie by our own
            # log-probabilities (where the two engines' rounding may pick differently; the
            # rule of test_qwen_coder.py).
            for i, (a, b) in enumerate(zip(out["tokens"], case["tokens"])):
                if a != b:
                    top = out["completion_probabilities"][i]["top_logprobs"]
                    assert top[0]["logprob"] - top[1]["logprob"] < NEAR_TIE_NATS, (case, i)
                    break
            else:
                assert out["tokens"] == case["tokens"]
        r = post(srv, "/infill", {"input_prefix": "x", "input_extra": [{"filename": 3}]})
        assert r.status_code == 400 and "text" in r.json()["error"]["message"]
    finally:
        stop(srv)
