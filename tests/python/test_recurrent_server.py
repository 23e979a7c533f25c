"""`mnemo serve` with the recurrent architectures, on tiny random-weight models
(tests/tools/make_tiny_model mamba2 / granitehybrid / qwen35, which carry a small SentencePiece
vocabulary).

- Prompt caching: a request sharing a prefix with the slot's previous conversation resumes from
  the newest state checkpoint at or before the shared prefix (Memory::plan_truncate), not from
  zero, and answers exactly as a request that re-reads the whole prompt.
- Multi-user: 4 requests decoded concurrently (continuous batching, one recurrent state per slot)
  answer exactly as each one alone — the multi-user bug of seed 001.
- Multi-turn on a hybrid (qwen35): 4 conversations at once, each turn re-reading at most one
  checkpoint interval of what its slot already holds, and answering as a fresh server does; a
  slot saved to a file and restored into another slot continues exactly.
Requests are greedy with token-id prompts, so no chat template is involved. With the checkpoint
interval of 64 used here, the ubatches of a cached and of an uncached run are cut at the same
positions, so their log-probabilities agree to float rounding (bound 1e-3 nats).
"""
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from helpers.server import Server

pytestmark = pytest.mark.kernels


ARCHS = ["mamba2", "granitehybrid", "qwen35"]  # conftest.py's tiny_recurrent models (seed 11)
CKPT_EVERY = 64


def serve(binary, model, *args):
    """`mnemo serve` with one compute thread."""
    return Server(binary, model, *args, threads=1, start_timeout=60)


def complete(srv, ids, cache=True, n=6):
    r = requests.post(f"{srv.url}/completion", json={
        "prompt": ids, "n_predict": n, "temperature": 0, "cache_prompt": cache,
        "return_tokens": True, "n_probs": 3}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def same_answer(a, b):
    """Equal greedy tokens and, when the server reports them (n_probs), log-probabilities."""
    assert a["tokens"] == b["tokens"]
    if "completion_probabilities" in a and "completion_probabilities" in b:
        la = [p["logprob"] for p in a["completion_probabilities"]]
        lb = [p["logprob"] for p in b["completion_probabilities"]]
        assert max(abs(x - y) for x, y in zip(la, lb)) <= 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_cache_resumes_from_a_checkpoint(binary, tiny_recurrent, arch):
    rng = random.Random(1)
    p1 = [rng.randrange(3, 512) for _ in range(300)]
    p2 = p1[:280] + [rng.randrange(3, 512) for _ in range(20)]
    srv = serve(binary, tiny_recurrent[arch], "--parallel", "1", "-c", "1024",
                 "--rs-ckpt-every", CKPT_EVERY, "--rs-ckpts", 4)
    try:
        r1 = complete(srv, p1)
        assert r1["timings"]["cache_n"] == 0
        r2 = complete(srv, p2)
        # The slot held p1 + 6 generated tokens with checkpoints after 63, 127, 191, 255: keeping
        # p2's shared 280 tokens resumes after position 255.
        assert r2["timings"]["cache_n"] == 256, r2["timings"]["cache_n"]
        r3 = complete(srv, p2, cache=False)
        assert r3["timings"]["cache_n"] == 0
        same_answer(r2, r3)
        # A prompt sharing less than one checkpoint interval starts from zero.
        r4 = complete(srv, p1[:40] + [5, 6, 7])
        assert r4["timings"]["cache_n"] == 0
        assert srv.alive()
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_concurrent_requests_equal_requests_alone(binary, tiny_recurrent, arch):
    rng = random.Random(2)
    prompts = [[rng.randrange(3, 512) for _ in range(n)] for n in (37, 5, 90, 12)]
    srv = serve(binary, tiny_recurrent[arch], "--parallel", "4", "-c", "2048")
    try:
        alone = [complete(srv, p, cache=False, n=8) for p in prompts]
        with ThreadPoolExecutor(4) as ex:
            together = list(ex.map(lambda p: complete(srv, p, cache=False, n=8), prompts))
        for a, t in zip(alone, together):
            same_answer(a, t)
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_slots_report_each_slots_own_memory(binary, tiny_recurrent, arch):
    # Every slot owns its recurrent state (cell and checkpoints, preallocated) and, for the
    # hybrid, its K/V stream: each reports the same nonzero bytes, busy or not. A mamba2 slot
    # holds no K/V at all: its K/V types are null.
    srv = serve(binary, tiny_recurrent[arch], "--parallel", "4", "-c", "1024")
    try:
        complete(srv, [5, 6, 7, 8, 9], cache=True, n=4)  # slot 0 now holds a conversation
        slots = requests.get(f"{srv.url}/slots", timeout=10).json()
        assert [s["id"] for s in slots] == [0, 1, 2, 3]
        assert slots[0]["n_tokens"] > 0
        sizes = {s["bytes"] for s in slots}
        assert len(sizes) == 1 and sizes.pop() > 0, slots
        for s in slots:
            if arch == "mamba2":
                assert s["type_k"] is None and s["type_v"] is None, s
            else:
                assert s["type_k"] == "f16" and s["type_v"] == "f16", s
        assert srv.alive()
    finally:
        assert srv.stop() == 0


def test_hybrid_multi_turn_rereads_at_most_one_checkpoint_interval(binary, tiny_recurrent):
    # Each turn sends the conversation so far: the previous prompt, the answer without its last
    # three tokens (as a chat template that rewrites the end of the assistant's turn would), and
    # new user tokens. The slot holds the previous prompt and the answer but its last token, so
    # the shared prefix ends two tokens before the slot's end: a recurrent state cannot be cut
    # back, so the slot resumes from its newest checkpoint at or before the shared prefix.
    every = 16
    rng = random.Random(3)
    convs = [[rng.randrange(3, 512) for _ in range(n)] for n in (40, 57, 23, 70)]
    srv = serve(binary, tiny_recurrent["qwen35"], "--parallel", "4", "-c", "4096",
                 "--rs-ckpt-every", every, "--rs-ckpts", 4)
    fresh = serve(binary, tiny_recurrent["qwen35"], "--parallel", "1", "-c", "1024")
    try:
        shared = [0] * len(convs)
        rolled_back = 0
        for turn in range(4):
            with ThreadPoolExecutor(4) as ex:
                got = list(ex.map(lambda p: complete(srv, p, n=6), convs))
            for i, (p, r) in enumerate(zip(convs, got)):
                t = r["timings"]
                assert t["cache_n"] + t["prompt_n"] == len(p)
                if turn > 0:
                    # Re-read: at most one interval before the shared prefix's end.
                    assert shared[i] - every <= t["cache_n"] <= shared[i], (turn, i, t)
                    assert t["prompt_n"] <= len(p) - shared[i] + every, (turn, i, t)
                    rolled_back += t["cache_n"] < shared[i]
                same_answer(r, complete(fresh, p, cache=False, n=6))
                shared[i] = len(p) + len(r["tokens"]) - 3
                convs[i] = p + r["tokens"][:-3] + [rng.randrange(3, 512) for _ in range(9)]
        assert rolled_back > 0  # checkpoints were used, not only a slot's live state
        assert srv.alive()
    finally:
        assert srv.stop() == 0
        assert fresh.stop() == 0


def test_hybrid_slot_save_restore_continues_exactly(binary, tiny_recurrent, tmp_path):
    srv = serve(binary, tiny_recurrent["qwen35"], "--parallel", "2", "-c", "2048",
                 "--slot-save-path", tmp_path, "--rs-ckpt-every", 16, "--rs-ckpts", 4)
    try:
        rng = random.Random(4)
        p = [rng.randrange(3, 512) for _ in range(75)]
        r = requests.post(f"{srv.url}/completion", json={
            "prompt": p, "n_predict": 5, "temperature": 0, "id_slot": 0, "cache_prompt": True,
            "return_tokens": True}, timeout=120)
        assert r.status_code == 200, r.text
        saved = requests.post(f"{srv.url}/slots/0?action=save", json={"filename": "q35.bin"},
                              timeout=60)
        assert saved.status_code == 200, saved.text
        restored = requests.post(f"{srv.url}/slots/1?action=restore",
                                 json={"filename": "q35.bin"}, timeout=60)
        assert restored.status_code == 200, restored.text
        follow = p + r.json()["tokens"] + [7, 8, 9]
        outs = []
        for slot in (0, 1):
            o = requests.post(f"{srv.url}/completion", json={
                "prompt": follow, "n_predict": 8, "temperature": 0, "id_slot": slot,
                "cache_prompt": True, "n_probs": 5, "return_tokens": True}, timeout=120)
            assert o.status_code == 200, o.text
            outs.append(o.json())
        # The restored slot holds what slot 0 held: the same cached prefix, the same tokens and
        # byte-equal log-probabilities.
        assert outs[1]["timings"]["cache_n"] == outs[0]["timings"]["cache_n"] > 0
        assert outs[0]["tokens"] == outs[1]["tokens"]
        assert outs[0]["completion_probabilities"] == outs[1]["completion_probabilities"]
        assert srv.alive()
    finally:
        assert srv.stop() == 0
