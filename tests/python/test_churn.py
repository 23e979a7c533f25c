"""Churn: the server built with a sanitizer under concurrent clients for a bounded time, with
the prompt cache's disk tier, a shared store and KV events on; then an exactness check and a
clean shutdown.

Run by scripts/churn, which builds build-asan/mnemo (AddressSanitizer + UndefinedBehaviorSanitizer;
scripts/test runs it for 120 s) or, with --tsan, build-tsan/mnemo (ThreadSanitizer; scripts/test:
90 s), and sets MNEMO_CHURN_BINARY, MNEMO_CHURN_SANITIZER (address or thread) and
MNEMO_CHURN_SECONDS (`scripts/churn 600` is the longer run). Without MNEMO_CHURN_BINARY the test
is skipped (a plain `pytest tests/python` has no sanitizer build; tests/python/skip_allowlist.txt
allows that skip).

The server runs with a small RAM tier and a disk tier (--cache-ram, --cache-dir, --cache-disk:
both evict), a redis-server of the test's own on loopback (--cache-store) and KV events with
vLLM's replay socket (--kv-events, --kv-events-replay), which a subscriber thread reads and
replays from for the whole run. Six clients for the whole time, each picking at random (seeded)
among: a completion, a stream read to its end, a stream cut after a few events, an OpenAI chat
stream, a constrained answer (json_object or a GBNF grammar), several completions in one request
(a list of prompts, n up to 3, streamed or not, some cut), and slot save / restore / erase /
requantize on a random slot. Asserted: no 5xx and no unanswered request (every request has a
60 s bound: a hung stream fails it), no sanitizer report (reports go to files; LeakSanitizer
runs at exit under ASan; a ThreadSanitizer report of any kind, data race or lock order, fails
it), KV-event batches received and well-formed, writes to the store and to the disk tier, exit
code 0 on SIGTERM, and that a slot saved and restored into another slot continues with
byte-equal log-probabilities.
"""
import json
import os
import random
import threading
import time
from pathlib import Path

import msgpack
import pytest
import requests
import zmq

from helpers.redis_server import Redis, free_port
from helpers.server import Server, metric

BINARY = os.environ.get("MNEMO_CHURN_BINARY")
SANITIZER = os.environ.get("MNEMO_CHURN_SANITIZER", "address")
SECONDS = float(os.environ.get("MNEMO_CHURN_SECONDS", "120"))
SLOTS = 4
# Exchanges the churn must see (a run that did almost nothing proves nothing): past SECONDS the
# clients go on until that many are done, for at most SECONDS more (a slow host under TSan ended
# at 19 in 90 s).
MIN_EXCHANGES = 20
TYPES = ["f16", "q8_0", "q4_0", "q5_1"]

pytestmark = pytest.mark.skipif(not BINARY, reason="scripts/churn sets MNEMO_CHURN_BINARY")


class Churn:
    def __init__(self, url, seed):
        self.url = url
        self.rng = random.Random(seed)
        self.counts = {}
        self.n_done = 0  # exchanges noted (any status)
        self.failures = []

    def note(self, what, status):
        key = f"{what} {status}"
        self.counts[key] = self.counts.get(key, 0) + 1
        self.n_done += 1
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

    def run(self, keep_going):
        actions = [self.complete, self.complete, lambda: self.stream(False),
                   lambda: self.stream(True), self.chat, self.structured,
                   lambda: self.several(False), lambda: self.several(True)] + \
            [self.slot_action] * 5
        while keep_going():
            try:
                self.rng.choice(actions)()
            except Exception as e:  # a hung or broken exchange
                self.failures.append(f"{type(e).__name__}: {e}")


class EventReader:
    """A router's view of the KV events for the whole run: a SUB socket on `endpoint` whose every
    batch must decode (msgpack: a map with `ts` and a list of `events`, each with its `type`)
    with a rising sequence number, and every few seconds a replay request on `replay_endpoint`
    from a little behind the last batch, which must end with vLLM's end marker."""

    def __init__(self, endpoint, replay_endpoint):
        self.replay_endpoint = replay_endpoint
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(endpoint)
        self.counts = {"batches": 0, "events": 0, "gaps": 0, "replays": 0, "replayed": 0}
        self.failures = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def batch(self, payload):
        b = msgpack.unpackb(payload)
        assert isinstance(b, dict) and isinstance(b["ts"], float), b
        assert all(isinstance(e, dict) and "type" in e for e in b["events"]), b
        return len(b["events"])

    def replay(self, start):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 60000)
        try:
            sock.connect(self.replay_endpoint)
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                delim, seq, payload = sock.recv_multipart()
                assert delim == b""
                if int.from_bytes(seq, "big", signed=True) == -1:
                    return
                self.batch(payload)
                self.counts["replayed"] += 1
        finally:
            sock.close()

    def run(self):
        last, next_replay = None, time.monotonic() + 5
        try:
            while not self.done.is_set():
                if self.sub.poll(200):
                    topic, seq, payload = self.sub.recv_multipart()
                    seq = int.from_bytes(seq, "big")
                    assert topic == b"" and (last is None or seq > last), (last, seq)
                    if last is not None and seq != last + 1:
                        self.counts["gaps"] += 1  # a PUB socket may drop (high-water mark)
                    last = seq
                    self.counts["batches"] += 1
                    self.counts["events"] += self.batch(payload)
                if last is not None and time.monotonic() > next_replay:
                    self.replay(max(0, last - 3))
                    self.counts["replays"] += 1
                    next_replay = time.monotonic() + 5
        except Exception as e:
            self.failures.append(f"events: {type(e).__name__}: {e}")

    def close(self):
        self.done.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the event reader is stuck"
        self.sub.close()
        self.ctx.term()


def post(url, path, body):
    return requests.post(url + path, json=body, timeout=120)


def sanitizer_env(reports):
    """The environment of the server under test: every sanitizer writes its reports to files
    under `reports` (the test fails on any), and a report makes the exit status non-zero."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"log_path={reports}/asan:detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = f"log_path={reports}/ubsan:print_stacktrace=1:halt_on_error=1"
    # halt_on_error=0: every report of the run is collected (each fails the test all the same);
    # exitcode 66 on any report; the second stack of a lock-order inversion too. The suppressions
    # file names each report that is not ours and why (libzmq's internal hand-offs).
    supp = Path(__file__).resolve().parents[1] / "sanitizers" / "tsan.supp"
    env["TSAN_OPTIONS"] = (f"log_path={reports}/tsan:halt_on_error=0:exitcode=66:"
                           f"second_deadlock_stack=1:history_size=4:suppressions={supp}")
    return env


def test_churn_under_sanitizers(tmp_path, smollm2_model):
    binary = Path(BINARY)
    assert binary.exists(), binary
    assert SANITIZER in ("address", "thread"), SANITIZER
    reports = tmp_path / "san"
    reports.mkdir()
    env = sanitizer_env(reports)
    slots = tmp_path / "slots"
    redis = Redis()  # a missing redis-server fails the test: the store is part of the churn
    events = f"tcp://127.0.0.1:{free_port()}"
    replay = f"tcp://127.0.0.1:{free_port()}"
    reader = EventReader(events, replay)
    srv = None
    try:
        srv = Server(binary, smollm2_model, "-np", SLOTS, "-c", "4096", "--metrics",
                     "--slot-save-path", slots, "--cache-ram", "16", "--cache-dir",
                     tmp_path / "cache", "--cache-disk", "48", "--cache-store", redis.url(),
                     "--cache-store-timeout", "5000", "--kv-events", events,
                     "--kv-events-replay", replay, "--n-predict-max", "64", env=env,
                     start_timeout=300)
        churn(srv, reader)
    finally:
        rc = srv.stop(timeout=120) if srv else None
        reader.close()
        redis.kill()
    found = sorted(reports.iterdir())
    text = "\n".join(p.read_text(errors="replace") for p in found)
    assert not found, "sanitizer reports:\n" + text[:20000]
    log = srv.log()
    assert "runtime error" not in log and "Sanitizer" not in log, log[-5000:]
    assert rc == 0, log[-3000:]


def churn(srv, reader):
    """The clients for SECONDS, the checks of the memory tiers and events, then the exactness
    check."""
    url = srv.url
    deadline = time.monotonic() + SECONDS
    clients = [Churn(url, seed) for seed in range(6)]

    def keep_going():
        now = time.monotonic()
        if now < deadline:
            return True
        return now < deadline + SECONDS and sum(c.n_done for c in clients) < MIN_EXCHANGES

    threads = [threading.Thread(target=c.run, args=(keep_going,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * SECONDS + 180)
        assert not t.is_alive(), "a client is stuck"
    counts = {}
    for c in clients:
        for k, v in c.counts.items():
            counts[k] = counts.get(k, 0) + v
    print("churn:", json.dumps(dict(sorted(counts.items()))))
    failures = [f for c in clients for f in c.failures]
    assert not failures, failures[:10]
    assert sum(counts.values()) >= MIN_EXCHANGES, counts

    # The memory tiers and the events took part: entries went to disk and to the store, KV-event
    # batches arrived well-formed, and replays answered.
    tiers = {name: metric(srv, name) for name in (
        "prompt_cache_stored_total", "prompt_cache_disk_writes_total",
        "prompt_cache_disk_reads_total", "prompt_cache_disk_errors_total",
        "prompt_cache_store_writes_total", "prompt_cache_store_hits_total",
        "prompt_cache_store_dropped_total", "prompt_cache_store_errors_total")}
    print("tiers:", json.dumps(tiers))
    print("events:", json.dumps(reader.counts))
    assert not reader.failures, reader.failures
    assert reader.counts["batches"] > 0 and reader.counts["replays"] > 0, reader.counts
    assert tiers["prompt_cache_disk_writes_total"] > 0, tiers
    assert tiers["prompt_cache_disk_errors_total"] == 0, tiers
    assert tiers["prompt_cache_store_writes_total"] > 0, tiers

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
