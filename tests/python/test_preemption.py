"""A full unified KV cache never fails a request it has started (docs/reliability.md §7).

With `--kv-unified` every slot's sequence shares one stream of `-c` cells. When running requests
fill it, a finished slot's memory gives way first, then the request admitted last is preempted:
its sequence state is set aside (and stashed in the prompt cache), its cells freed, and it
resumes from the same state and sampler when cells free up. Each answer is byte-equal (tokens
and log-probabilities) to its answer on an idle server. A request fails only when it alone
cannot fit, and then before its body or stream starts.
"""
import json
import random
import threading
import time

import pytest
import requests

from helpers.server import Server, metric, stop

pytestmark = pytest.mark.kernels


def ask(srv, prompt, n, **fields):
    """A greedy /completion (ignore_eos: exactly n tokens) with its tokens and log-probs."""
    r = requests.post(srv.url + "/completion", json={
        "prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True,
        "return_tokens": True, "n_probs": 2, **fields}, timeout=600)
    assert r.status_code == 200, r.text
    out = r.json()
    assert "error" not in out, out  # not an error inside a 200
    return out


def answer(r):
    """Tokens and log-probabilities as one string: equal strings are byte-equal answers."""
    return json.dumps([r["tokens"], r["completion_probabilities"]])


def all_at_once(srv, jobs):
    """Runs every (prompt, n) of `jobs` in its own thread, all started together; returns the
    answers in order."""
    out = [None] * len(jobs)
    errors = []
    go = threading.Barrier(len(jobs))

    def run(i, prompt, n):
        try:
            go.wait()
            out[i] = ask(srv, prompt, n)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, p, n)) for i, (p, n) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    return out


@pytest.mark.parametrize("lengths", [(80, 40, 80, 80), (100, 100, 100, 100)])
def test_four_requests_that_overfill_a_unified_cache_all_complete_exactly(binary, model, lengths):
    # 1 prompt token each: 80/40/80/80 need 276 cells of 256 (the finished 40-token slot's
    # memory gives way); 4 x 100 need 396 (requests are preempted and resumed).
    srv = Server(binary, model, "-kvu", "-c", 256, "-np", 4, "--metrics")
    try:
        jobs = [([400 + 17 * i], n) for i, n in enumerate(lengths)]
        idle = [ask(srv, p, n) for p, n in jobs]  # one at a time: an idle server
        busy = all_at_once(srv, jobs)
        for (p, n), a, b in zip(jobs, idle, busy):
            assert b["tokens_predicted"] == n and len(b["tokens"]) == n
            assert answer(b) == answer(a), (p, n)
        assert metric(srv, "errors_total", '{kind="cache_full"}') == 0
        if sum(lengths) > 256 + 40:
            assert metric(srv, "preemptions_total") >= 1
            assert "preempted" in srv.log() and "resumed" in srv.log()
        else:
            # The finished 40-token request's memory gave way: nothing was preempted.
            assert metric(srv, "preemptions_total") == 0
        assert metric(srv, "requests_preempted") == 0
    finally:
        stop(srv)


def test_churn_of_eight_clients_on_a_small_unified_cache(binary, model):
    # Eight clients, each a few requests of random prompts and lengths, on 512 shared cells and
    # 4 slots (no prompt-cache RAM tier: a preempted request comes back from its own buffer).
    # Every request completes and answers as on an idle server.
    rng = random.Random(27)
    jobs = [[([rng.randrange(300, 20000) for _ in range(rng.randint(1, 120))],
              rng.randint(8, 120)) for _ in range(2)] for _ in range(8)]
    ref = Server(binary, model, "-kvu", "-c", 512, "-np", 1)
    try:
        idle = [[answer(ask(ref, p, n, cache_prompt=False)) for p, n in client] for client in jobs]
    finally:
        stop(ref)
    srv = Server(binary, model, "-kvu", "-c", 512, "-np", 4, "--metrics", "--cache-ram", 0)
    try:
        got = [[None] * len(c) for c in jobs]
        errors = []

        def client(i):
            try:
                for k, (p, n) in enumerate(jobs[i]):
                    got[i][k] = answer(ask(srv, p, n))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        assert not errors, errors
        for i in range(8):
            for k in range(len(jobs[i])):
                assert got[i][k] == idle[i][k], (i, k)
        assert metric(srv, "preemptions_total") >= 1
        assert metric(srv, "errors_total", '{kind="cache_full"}') == 0
        assert metric(srv, "requests_total") == 16
    finally:
        stop(srv)


def generating(srv, n_tokens):
    """Waits until some slot generates and holds at least n_tokens tokens."""
    deadline = time.time() + 120
    while time.time() < deadline:
        slots = requests.get(srv.url + "/slots").json()
        if any(x["state"] == "generating" and x["n_tokens"] >= n_tokens for x in slots):
            return
        time.sleep(0.02)
    raise AssertionError("no slot started generating")


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_alone_cannot_fit_is_refused_before_any_body(binary, model, stream):
    srv = Server(binary, model, "-kvu", "-c", 256, "-np", 4, "--metrics")
    try:
        fits = list(range(300, 300 + 200))
        ref = ask(srv, fits, 40, cache_prompt=False)  # on an idle server
        # A long request holds cells meanwhile (201 of them at its end).
        long = {}
        t = threading.Thread(target=lambda: long.update(r=ask(srv, [500], 200)))
        t.start()
        generating(srv, 8)
        # The refusal is about the request alone: the status comes before any body or event.
        r = requests.post(srv.url + "/completion", json={
            "prompt": list(range(300, 300 + 256)), "n_predict": 4, "stream": stream},
            stream=stream, timeout=60)
        assert r.status_code == 400, r.text
        assert r.headers["Content-Type"].startswith("application/json"), r.headers
        err = r.json()["error"]
        assert err["type"] == "exceed_context_size_error", err
        assert err["n_prompt_tokens"] == 256 and err["n_ctx"] == 256, err
        # One that fits alone but not beside it (240 + 201 cells of 256) is served: it waits for
        # cells or is preempted, and answers as on the idle server.
        if stream:
            r = requests.post(srv.url + "/completion", json={
                "prompt": fits, "n_predict": 40, "temperature": 0, "ignore_eos": True,
                "cache_prompt": False, "stream": True}, stream=True, timeout=600)
            assert r.status_code == 200, r.text
            events = [json.loads(line[len(b"data: "):]) for line in r.iter_lines()
                      if line.startswith(b"data: ")]
            assert all("error" not in e for e in events), events[-1]
            assert "".join(e.get("content", "") for e in events) == ref["content"]
        else:
            assert answer(ask(srv, fits, 40, cache_prompt=False)) == answer(ref)
        t.join(600)
        assert long["r"]["tokens_predicted"] == 200
        assert metric(srv, "errors_total", '{kind="cache_full"}') == 0
    finally:
        stop(srv)
