"""Router mode: `mnemo serve` without -m serves every model of --models-dir / --models-preset
in one process (llama-server's router). A directory with SmolLM2, Gemma 3 and
Qwen2.5-Coder-0.5B and --models-max 2: requests alternate between the three models, each answer
equals a single-model server's; a conversation on a model that was unloaded and loaded again
reads only its new turn (its slots went to the disk prompt cache at the unload); unknown,
missing and failing models get clear errors while the others keep serving.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from helpers.server import Server, stop

MODELS = {
    "SmolLM2-135M-Instruct-Q4_1": "SmolLM2-135M-Instruct-Q4_1.gguf",
    "gemma-3-270m-Q4_K_M": "gemma-3-270m-Q4_K_M.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
FLAGS = ["-c", 1024, "-np", 1]
PROMPT = "The three most useful things to know about memory are"


def completion(srv, model=None, prompt=PROMPT, n=8, **extra):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, **extra}
    if model is not None:
        body["model"] = model
    r = requests.post(srv.url + "/completion", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def statuses(srv):
    data = requests.get(srv.url + "/models", timeout=30).json()["data"]
    return {m["id"]: m["status"]["value"] for m in data}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, models_dir):
    d = tmp_path_factory.mktemp("router-models")
    for name, file in MODELS.items():
        src = models_dir / file
        if not src.exists():
            pytest.skip(f"{src} missing: run scripts/fetch-model")
        (d / file).symlink_to(src)
    return d


@pytest.fixture(scope="module")
def reference(binary, models_dir):
    """Each model's answer from a single-model server with the same flags."""
    out = {}
    for name, file in MODELS.items():
        srv = Server(binary, models_dir / file, *FLAGS)
        try:
            out[name] = completion(srv)["content"]
        finally:
            stop(srv)
    return out


def test_router_serves_each_model_as_a_single_model_server(binary, models_dir, reference,
                                                           tmp_path):
    srv = Server(binary, None, "--models-dir", models_dir, "--models-max", 2,
                 "--cache-dir", tmp_path / "cache", "--metrics", *FLAGS)
    try:
        assert set(statuses(srv)) == set(MODELS)
        assert set(statuses(srv).values()) == {"unloaded"}
        props = requests.get(srv.url + "/props", timeout=30).json()
        assert props["role"] == "router" and props["max_instances"] == 2
        # Alternate between the three: at most two are loaded at once.
        order = list(MODELS) * 2
        for name in order:
            out = completion(srv, name)
            assert out["content"] == reference[name], name
            assert out["model"] == name
            st = statuses(srv)
            assert st[name] == "loaded" and list(st.values()).count("loaded") <= 2, st
        # GET routes pick the model with ?model=.
        name = order[-1]
        slots = requests.get(srv.url + f"/slots?model={name}", timeout=30).json()
        assert len(slots) == 1 and slots[0]["n_tokens"] > 0
        m = requests.get(srv.url + f"/metrics?model={name}", timeout=30).text
        assert "llamacpp:tokens_predicted_total" in m
        m = requests.get(srv.url + "/metrics", timeout=30).text
        assert f'mnemo_router_model_loaded{{model="{name}"}} 1' in m
        kv = [l for l in m.splitlines() if l.startswith(f'mnemo_router_model_kv_bytes{{model="{name}"}}')]
        assert len(kv) == 1 and float(kv[0].split()[-1]) > 0, m
        toks = requests.post(srv.url + f"/tokenize?model={name}", json={"content": "hello"},
                             timeout=30).json()["tokens"]
        assert toks
        p = requests.get(srv.url + f"/props?model={name}", timeout=30).json()
        assert p["default_generation_settings"]["n_ctx"] == 1024
        # Two loaded models generating at once (one shared compute pool: their decodes take
        # turns) still answer as alone.
        both = [n for n, v in statuses(srv).items() if v == "loaded"]
        with ThreadPoolExecutor(2) as ex:
            outs = list(ex.map(lambda n: completion(srv, n, n=16)["content"], both))
        for n, out in zip(both, outs):
            assert out.startswith(reference[n]), n
    finally:
        stop(srv)


def test_a_reloaded_model_reads_only_the_new_turn(binary, models_dir, tmp_path):
    srv = Server(binary, None, "--models-dir", models_dir, "--models-max", 1,
                 "--cache-dir", tmp_path / "cache", *FLAGS)
    try:
        smol = "SmolLM2-135M-Instruct-Q4_1"
        # Longer than two prompt-cache blocks (--cache-block 64): whole blocks are cached.
        chat = [{"role": "system", "content": "You are a careful assistant. " * 20},
                {"role": "user", "content": "Name three colours of the rainbow, please."}]
        r = requests.post(srv.url + "/v1/chat/completions", timeout=300, json={
            "model": smol, "messages": chat, "max_tokens": 12, "temperature": 0}).json()
        first_prompt = r["usage"]["prompt_tokens"]
        chat += [r["choices"][0]["message"], {"role": "user", "content": "And two more?"}]
        completion(srv, "gemma-3-270m-Q4_K_M")  # --models-max 1: SmolLM2 is unloaded
        assert statuses(srv)[smol] == "unloaded"
        r = requests.post(srv.url + "/v1/chat/completions", timeout=300, json={
            "model": smol, "messages": chat, "max_tokens": 4, "temperature": 0,
            "timings_per_token": True}).json()
        cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= first_prompt, r["usage"]
        assert r["usage"]["prompt_tokens"] - cached < 30, r["usage"]  # the new turn only
    finally:
        stop(srv)


def test_router_errors_and_load_control(binary, models_dir, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    preset = tmp_path / "models.ini"
    preset.write_text(
        "[*]\nc = 1024\n\n"
        f"[small]\nmodel = {models_dir / MODELS['SmolLM2-135M-Instruct-Q4_1']}\nc = 512\n\n"
        f"[broken]\nmodel = {bad}\n\n"
        f"[huge]\nmodel = {models_dir / MODELS['SmolLM2-135M-Instruct-Q4_1']}\nc = 40000000\n")
    srv = Server(binary, None, "--models-preset", preset, "--no-models-autoload", "-np", 1)
    try:
        assert set(statuses(srv)) == {"small", "broken", "huge"}
        # Unknown model: 404 in the API's error shape; missing model: 400.
        r = requests.post(srv.url + "/v1/chat/completions", timeout=60, json={
            "model": "nope", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
        r = requests.post(srv.url + "/v1/messages", timeout=60, json={
            "model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["type"] == "error"
        r = requests.post(srv.url + "/completion", json={"prompt": "hi"}, timeout=60)
        assert r.status_code == 400 and "model" in r.json()["error"]["message"]
        # --no-models-autoload: refused until loaded.
        r = requests.post(srv.url + "/completion", timeout=60,
                          json={"model": "small", "prompt": "hi", "n_predict": 1})
        assert r.status_code == 400 and "/models/load" in r.json()["error"]["message"]
        assert requests.post(srv.url + "/models/load", json={"model": "small"},
                             timeout=300).json() == {"success": True}
        assert completion(srv, "small", n=2)["tokens_predicted"] == 2
        p = requests.get(srv.url + "/props?model=small", timeout=30).json()
        assert p["default_generation_settings"]["n_ctx"] == 512  # the preset's c = 512
        # A model that fails to load: a clear error; the other keeps serving.
        r = requests.post(srv.url + "/models/load", json={"model": "broken"}, timeout=300)
        assert r.status_code in (400, 500) and "broken" in r.json()["error"]["message"]
        assert statuses(srv)["broken"] == "failed"
        assert completion(srv, "small", n=2)["tokens_predicted"] == 2
        # K/V larger than the machine: refused with the numbers, not a crash.
        r = requests.post(srv.url + "/models/load", json={"model": "huge"}, timeout=300)
        assert r.status_code in (500, 503) and "huge" in r.json()["error"]["message"], r.text
        assert "bytes" in r.json()["error"]["message"] or "MiB" in r.json()["error"]["message"]
        assert requests.post(srv.url + "/models/load", json={"model": "small"},
                             timeout=300).json() == {"success": True}
        assert requests.post(srv.url + "/models/unload", json={"model": "small"},
                             timeout=300).json() == {"success": True}
        assert statuses(srv)["small"] == "unloaded"
        r = requests.post(srv.url + "/models/unload", json={"model": "small"}, timeout=60)
        assert r.status_code == 400
    finally:
        stop(srv)


@pytest.mark.parametrize("write,flag,why", [
    (None, "--models-dir", "cannot list it"),
    ("[coder]\nc = 512\n", "--models-preset", "has no 'model = PATH'"),
    ("c = 512\n", "--models-preset", "outside any [section]"),
    ("[a]\n--ctx-size = 512\n", "--models-preset", "without their dashes"),
])
def test_bad_model_lists_stop_the_router_at_start(binary, tmp_path, write, flag, why):
    """A models directory that cannot be listed and a preset that is malformed are clear errors
    at start (exit status 1, the file and line named), not a router serving nothing."""
    target = tmp_path / ("models.ini" if write is not None else "missing-dir")
    if write is not None:
        target.write_text(write)
    r = subprocess.run([str(binary), "serve", "--port", "0", flag, str(target)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and why in r.stderr, r.stderr
    r = subprocess.run([str(binary), "serve", "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "--models-dir" in r.stderr, r.stderr
