"""Churn: the server built with AddressSanitizer + UndefinedBehaviorSanitizer under concurrent
clients for a bounded time, then an exactness check and a clean shutdown.

Run by scripts/churn (scripts/test runs it for 120 s; `scripts/churn 600` is the longer run),
which builds build-asan/mnemo and sets MNEMO_CHURN_BINARY and MNEMO_CHURN_SECONDS. Without
MNEMO_CHURN_BINARY the test is skipped (a plain `pytest tests/python` has no sanitizer build).

Six clients for the whole time, each picking at random (seeded) among: a completion, a stream
read to its end, a stream cut after a few events, an OpenAI chat stream, a constrained answer
(json_object or a GBNF grammar), several completions in one request (a list of prompts, n up to
3, streamed or not, some cut), and slot save / restore / erase / requantize on a random slot. Asserted: no 5xx and no unanswered request (every request
has a 60 s bound: a hung stream fails it), no sanitizer report (reports go to files; LeakSanitizer
runs at exit), exit code 0 on SIGTERM, and that a slot saved and restored into another slot
continues with byte-equal log-probabilities.
"""
import json
import os
import random
import threading
import time
from pathlib import Path

import pytest
import requests

from helpers.server import Server

BINARY = os.environ.get("MNEMO_CHURN_BINARY")
SECONDS = float(os.environ.get("MNEMO_CHURN_SECONDS", "120"))
SLOTS = 4
TYPES = ["f16", "q8_0", "q4_0", "q5_1"]

pytestmark = pytest.mark.skipif(not BINARY, reason="scripts/churn sets MNEMO_CHURN_BINARY")


class Churn:
    def __init__(self, url, seed):
        self.url = url
        self.rng = random.Random(seed)
        self.counts = {}
        self.failures = []

    def note(self, what, status):
        key = f"{what} {status}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if status >= 500:
            self.failures.append(key)

    def prompt(self):
        words = ["memory", "slot", "cache", "river", "lamp", "stone", "window", "paper", "tree"]
        n = self.rng.randint(3, 120)
        return " ".join(self.rng.choice(words) for _ in range(n))

    def complete(self):
        r = requests.post(self.url + "/completion", timeout=60, json={
            "prompt": self.prompt(), "n_predict": self.rng.randint(1, 16),
            "id_slot": self.rng.choice([-1, 0, 1]), "n_probs": self.rng.choice([0, 3])})
        self.note("completion", r.status_code)

    def stream(self, cut):
        with requests.post(self.url + "/completion", stream=True, timeout=60, json={
                "prompt": self.prompt(), "n_predict": self.rng.randint(4, 24),
                "stream": True}) as r:
            self.note("stream-cut" if cut else "stream", r.status_code)
            if r.status_code != 200:
                return
            events, stop_at = 0, self.rng.randint(1, 4)
            for line in r.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                events += 1
                j = json.loads(line[6:])
                assert "error" not in j or j["error"]["code"] < 500, j
                if cut and events >= stop_at:
                    return  # the connection closes with the context manager
                if j.get("stop"):
                    return
            if not cut:
                raise AssertionError("a stream ended without its final event")

    def chat(self):
        with requests.post(self.url + "/v1/chat/completions", stream=True, timeout=60, json={
                "messages": [{"role": "user", "content": self.prompt()}],
                "max_tokens": self.rng.randint(1, 12), "stream": True}) as r:
            self.note("chat", r.status_code)
            if r.status_code == 200:
                body = r.content
                assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]

    def structured(self):
        body = {"messages": [{"role": "user", "content": self.prompt()}],
                "max_tokens": self.rng.randint(4, 40), "temperature": self.rng.choice([0, 0.9]),
                "response_format": {"type": "json_object"}}
        if self.rng.random() < 0.5:
            body["grammar"] = 'root ::= [a-z ]{1,30} "."'
            del body["response_format"]
        r = requests.post(self.url + "/v1/chat/completions", json=body, timeout=60)
        self.note("structured", r.status_code)

    def several(self, cut):
        body = {"prompt": [self.prompt(), self.prompt()] if self.rng.random() < 0.5
                else self.prompt(), "n": self.rng.randint(1, 3),
                "max_tokens": self.rng.randint(1, 12), "stream": cut or self.rng.random() < 0.5}
        with requests.post(self.url + "/v1/completions", json=body, stream=True,
                           timeout=60) as r:
            self.note("several-cut" if cut else "several", r.status_code)
            if r.status_code != 200:
                return
            if cut:
                for i, _ in enumerate(r.iter_lines()):
                    if i >= 2:
                        return
            else:
                r.content  # read to the end

    def slot_action(self):
        slot = self.rng.randrange(SLOTS)
        kind = self.rng.choice(["save", "restore", "erase", "requantize"])
        name = f"churn{self.rng.randrange(3)}.bin"
        if kind == "requantize":
            t = self.rng.choice(TYPES)
            r = requests.post(self.url + "/cache/requantize", timeout=60,
                              json={"ctk": t, "ctv": t, "slot": slot})
        else:
            body = {} if kind == "erase" else {"filename": name}
            r = requests.post(f"{self.url}/slots/{slot}?action={kind}", json=body, timeout=60)
        self.note(kind, r.status_code)

    def run(self, deadline):
        actions = [self.complete, self.complete, lambda: self.stream(False),
                   lambda: self.stream(True), self.chat, self.structured,
                   lambda: self.several(False), lambda: self.several(True)] + \
            [self.slot_action] * 5
        while time.monotonic() < deadline:
            try:
                self.rng.choice(actions)()
            except Exception as e:  # a hung or broken exchange
                self.failures.append(f"{type(e).__name__}: {e}")


def post(url, path, body):
    return requests.post(url + path, json=body, timeout=120)


def test_churn_under_sanitizers(tmp_path, smollm2_model):
    binary = Path(BINARY)
    assert binary.exists(), binary
    reports = tmp_path / "san"
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"log_path={reports}/asan:detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = f"log_path={reports}/ubsan:print_stacktrace=1:halt_on_error=1"
    reports.mkdir()
    slots = tmp_path / "slots"
    srv = Server(binary, smollm2_model, "-np", SLOTS, "-c", "4096", "--metrics", "--slot-save-path",
                 slots, "--cache-ram", "64", "--n-predict-max", "64", env=env, start_timeout=300)
    url = srv.url
    try:
        deadline = time.monotonic() + SECONDS
        clients = [Churn(url, seed) for seed in range(6)]
        threads = [threading.Thread(target=c.run, args=(deadline,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SECONDS + 180)
            assert not t.is_alive(), "a client is stuck"
        counts = {}
        for c in clients:
            for k, v in c.counts.items():
                counts[k] = counts.get(k, 0) + v
        print("churn:", json.dumps(dict(sorted(counts.items()))))
        failures = [f for c in clients for f in c.failures]
        assert not failures, failures[:10]
        assert sum(counts.values()) >= 20, counts

        # Exactness after the churn: slot 0 saved and restored into slot 2 continues exactly as
        # slot 0 does (greedy, byte-equal log-probabilities).
        r = post(url, "/cache/requantize", {"ctk": "f16", "ctv": "f16"})
        assert r.status_code == 200, r.text
        for s in range(SLOTS):
            assert post(url, f"/slots/{s}?action=erase", {}).status_code == 200
        prompt = "The three most useful things to keep in memory are"
        first = post(url, "/completion", {"prompt": prompt, "n_predict": 6, "id_slot": 0,
                                          "temperature": 0, "return_tokens": True})
        assert first.status_code == 200, first.text
        assert post(url, "/slots/0?action=save", {"filename": "exact.bin"}).status_code == 200
        r = post(url, "/slots/2?action=restore", {"filename": "exact.bin"})
        assert r.status_code == 200, r.text
        follow = prompt + first.json()["content"] + " and"
        outs = []
        for s in (0, 2):
            r = post(url, "/completion", {"prompt": follow, "n_predict": 8, "id_slot": s,
                                          "temperature": 0, "n_probs": 5})
            assert r.status_code == 200, r.text
            outs.append(r.json())
        assert outs[0]["timings"]["prompt_n"] == outs[1]["timings"]["prompt_n"]
        assert outs[0]["completion_probabilities"] == outs[1]["completion_probabilities"]
        assert outs[0]["content"] == outs[1]["content"]
    finally:
        rc = srv.stop(timeout=120)
    found = sorted(reports.iterdir())
    text = "\n".join(p.read_text(errors="replace") for p in found)
    assert not found, "sanitizer reports:\n" + text[:20000]
    log = srv.log()
    assert "runtime error" not in log and "Sanitizer" not in log, log[-5000:]
    assert rc == 0, log[-3000:]
