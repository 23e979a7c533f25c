"""Prompts and completions of the prompt-cache and replica tests (test_prompt_cache.py,
test_replicas.py).

Prompts are token ids (no chat template), so which tokens a slot holds is known exactly: after a
request with prompt P that generated G, the slot holds P + G[:-1] (the last sampled token is
never decoded).
"""
import json
import random
import time

import requests


def ids(n, seed):
    """n token ids of ordinary text tokens (SmolLM2's vocabulary: 49152; Gemma's is larger)."""
    rng = random.Random(seed)
    return [rng.randrange(300, 20000) for _ in range(n)]


def complete(srv, prompt, n=8, **fields):
    """A greedy /completion with tokens and log-probs; `_seconds` is its wall time."""
    t0 = time.time()
    r = requests.post(srv.url + "/completion", json={
        "prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True,
        "return_tokens": True, "n_probs": 3, **fields}, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    out["_seconds"] = time.time() - t0
    return out


def probs(r):
    """Tokens and log-probabilities as one string: equal strings are byte-equal answers."""
    return json.dumps([r["tokens"], r["completion_probabilities"]])


def held(prompt, r):
    """The tokens the slot holds after answering r for prompt."""
    return prompt + r["tokens"][:-1]
