"""The prompt cache below the slots (`mnemo serve --cache-ram / --cache-dir`), end to end.

A conversation whose slot was taken by another one, or whose server restarted, continues
without reading its prompt again (timings.cache_n / prompt_n say so) and answers exactly as a
request that reads the whole prompt (byte-equal log-probabilities: restoring a state in the
slot's own K/V type changes no bit, docs/numerics.md). Also: a shared system prompt read once,
a request pinned to a slot still finding other slots' and the cache's prefixes, cache_prompt:
false bypassing every tier, the disk tier's failures (unusable directory, full disk, damaged /
truncated / other-model entries, a lying or missing index, two servers on one directory), the
sliding-window (Gemma 3), recurrent and hybrid memories, entries stored in another K/V type, and
`mnemo cache list | verify | clear` (clear beside a running server too).

Prompts are token ids (no chat template), so which tokens a slot holds is known exactly: after a
request with prompt P that generated G, the slot holds P + G[:-1] (the last sampled token is
never decoded).
"""
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from helpers.cache import complete, held, ids, probs
from helpers.server import Server, metric, stop

BLOCK = 64

pytestmark = pytest.mark.kernels


def smol_server(binary, model, *args, **kw):
    return Server(binary, model, "-c", 4096, "--metrics", *args, **kw)


def entry_files(cache_dir):
    return sorted(Path(cache_dir).glob("*/*.state"))


# --- one server: slots taken by other conversations ---------------------------------------------


def test_a_conversation_continues_after_its_slot_was_taken(binary, model):
    srv = smol_server(binary, model, "-np", 1)
    try:
        a1 = ids(300, 1)
        r1 = complete(srv, a1)
        assert r1["timings"]["cache_n"] == 0 and r1["timings"]["prompt_n"] == 300
        complete(srv, ids(200, 2))  # takes the only slot: conversation a goes to the cache
        a2 = held(a1, r1) + r1["tokens"][-1:] + ids(20, 3)
        r2 = complete(srv, a2)
        t = r2["timings"]
        assert t["cache_n"] == len(held(a1, r1)), t  # exact to the token
        assert t["prompt_n"] == len(a2) - t["cache_n"] == 21, t
        fresh = complete(srv, a2, cache_prompt=False)
        assert fresh["timings"]["cache_n"] == 0
        assert probs(r2) == probs(fresh)
        assert metric(srv, "prompt_cache_hits_total", '{tier="ram"}') == 1
        assert metric(srv, "prompt_cache_stored_total") >= 1
        # OpenAI shape: the final usage carries the cached tokens too.
        r = requests.post(srv.url + "/v1/completions", json={
            "prompt": a2, "max_tokens": 2, "temperature": 0}, timeout=60).json()
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == len(a2) - 1
        assert r["timings"]["cache_n"] == len(a2) - 1 and r["timings"]["prompt_n"] == 1
    finally:
        stop(srv)


def test_a_stash_never_holds_up_the_other_slots(binary, model, tmp_path):
    """A slot's memory is stashed on the stash thread (split KV): while that stash is held at a
    gate (the MNEMO_TEST_STASH_GATE test hook), the loop still answers /metrics and serves
    another slot's request to its end; only the request that took the stashed slot waits for
    it. Then that request and the stashed conversation both continue exactly."""
    gate = tmp_path / "gate"
    srv = smol_server(binary, model, "-np", 2,
                      env=dict(os.environ, MNEMO_TEST_STASH_GATE=str(gate)))
    try:
        a = ids(300, 1)
        ra = complete(srv, a, id_slot=1)
        gate.touch()
        taken = {}
        b = ids(100, 2)
        t = threading.Thread(target=lambda: taken.update(r=complete(srv, b, id_slot=1)))
        t.start()  # b takes slot 1: conversation a is stashed, and the stash waits at the gate
        deadline = time.time() + 30
        while metric(srv, "requests_deferred") != 1:
            assert time.time() < deadline, "b was never queued behind the stash"
            time.sleep(0.05)
        other = complete(srv, ids(50, 3), n=8, id_slot=0)
        assert len(other["tokens"]) == 8
        assert t.is_alive() and metric(srv, "requests_deferred") == 1  # b still waits
        gate.unlink()
        t.join(120)
        assert taken["r"]["timings"]["prompt_n"] == 100
        assert probs(taken["r"]) == probs(complete(srv, b, cache_prompt=False, id_slot=0))
        # Conversation a went into the cache whole: its next turn reads only the new tokens.
        a2 = held(a, ra) + ra["tokens"][-1:] + ids(20, 4)
        r2 = complete(srv, a2, id_slot=1)
        assert r2["timings"]["cache_n"] == len(held(a, ra)), r2["timings"]
        assert probs(r2) == probs(complete(srv, a2, cache_prompt=False, id_slot=0))
    finally:
        if gate.exists():
            gate.unlink()
        stop(srv)


def test_a_shared_system_prompt_is_read_once(binary, model):
    system = ids(600, 10)
    for mode in ([], ["-kvu"]):
        srv = smol_server(binary, model, "-np", 4, *mode)
        try:
            first = complete(srv, system + ids(30, 11), n=2)
            assert first["timings"]["prompt_n"] == 630
            # Slots 1, 2, 3 copy the prefix from slot 0; then 0 and 1 again (under a capped
            # MNEMO_SIMD, scripts/test's other targets, the copies alone: the numerics are the
            # same, and the slow targets read 630 tokens per fresh answer).
            for i in range(3 if os.environ.get("MNEMO_SIMD") else 5):
                prompt = system + ids(30, 20 + i)
                r = complete(srv, prompt, n=2, id_slot=(i + 1) % 4)
                assert r["timings"]["cache_n"] >= 600, (mode, i, r["timings"])
                # A copied (split) or shared (unified) prefix answers exactly as a full read.
                fresh = complete(srv, prompt, n=2, id_slot=(i + 1) % 4, cache_prompt=False)
                assert probs(r) == probs(fresh), (mode, i)
        finally:
            stop(srv)


def test_a_pinned_slot_still_looks_in_every_tier(binary, model):
    srv = smol_server(binary, model, "-np", 2)
    try:
        a = ids(250, 30)
        r = complete(srv, a, id_slot=0)
        # Slot 1 has never seen a: the prefix is copied from slot 0.
        again = a + ids(10, 31)
        r1 = complete(srv, again, id_slot=1)
        assert r1["id_slot"] == 1
        assert r1["timings"]["cache_n"] == 250, r1["timings"]
        assert probs(r1) == probs(complete(srv, again, id_slot=1, cache_prompt=False))
        del r
    finally:
        stop(srv)


def test_cache_prompt_false_bypasses_every_tier(binary, model):
    srv = smol_server(binary, model, "-np", 1)
    try:
        a = ids(200, 40)
        r = complete(srv, a)
        stored = metric(srv, "prompt_cache_stored_total")
        r2 = complete(srv, held(a, r) + ids(5, 41), cache_prompt=False)
        assert r2["timings"]["cache_n"] == 0
        assert metric(srv, "prompt_cache_stored_total") == stored + 1  # a's memory, not r2's
        complete(srv, ids(100, 42))  # drops r2's tokens: not stored (its request said no)
        assert metric(srv, "prompt_cache_stored_total") == stored + 1
    finally:
        stop(srv)


def test_cache_ram_0_disables_the_ram_tier(binary, model, tmp_path):
    srv = smol_server(binary, model, "-np", 1, "--cache-ram", 0)
    try:
        a = ids(200, 50)
        r = complete(srv, a)
        complete(srv, ids(100, 51))
        assert complete(srv, held(a, r) + [5])["timings"]["cache_n"] == 0
        assert "mnemo_prompt_cache_bytes" not in requests.get(srv.url + "/metrics").text
    finally:
        stop(srv)
    # With a directory, the disk tier alone.
    srv = smol_server(binary, model, "-np", 1, "--cache-ram", 0, "--cache-dir", tmp_path)
    try:
        r = complete(srv, a)
        complete(srv, ids(100, 51))
        r2 = complete(srv, held(a, r) + [5])
        assert r2["timings"]["cache_n"] == len(held(a, r))
        assert metric(srv, "prompt_cache_hits_total", '{tier="disk"}') == 1
        assert metric(srv, "prompt_cache_bytes", '{tier="ram"}') == 0
    finally:
        stop(srv)


def test_bad_cache_flags_are_clear_errors(binary, model):
    """A bad store URL, events endpoint or format, or budget stops the server at start with a
    message that names the flag, and never repeats a store password."""
    cases = [
        (["--cache-store", "ftp://host:6379"], "--cache-store"),
        (["--cache-store", "redis://:s3cret@host:99999"], "port"),
        (["--cache-store", "redis://host/db1"], "database"),
        (["--cache-store-timeout", "0", "--cache-store", "redis://127.0.0.1:1"], "timeout"),
        (["--kv-events", "not-an-endpoint"], "--kv-events"),
        (["--kv-events", "tcp://127.0.0.1:*", "--kv-events-replay", "not-an-endpoint"],
         "--kv-events-replay"),
        (["--kv-events-replay", "tcp://127.0.0.1:*"], "--kv-events-replay needs --kv-events"),
        (["--kv-events-format", "msgpack"], "--kv-events-format"),
        (["--cache-ram", "-5"], "--cache-ram"),
        (["--cache-block", "0"], "--cache-block"),
        (["--prompt-cache-type-v", "q6_K"], "not a K/V cache type"),
    ]
    for args, expect in cases:
        r = subprocess.run([str(binary), "serve", "-m", str(model), "--port", "0", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, (args, r.stderr)
        assert expect in r.stderr, (args, r.stderr)
        assert "s3cret" not in r.stderr


# --- the disk tier: restarts and failures ------------------------------------------------------


def test_a_conversation_survives_a_restart(binary, model, tmp_path):
    cache = tmp_path / "cache"
    srv = smol_server(binary, model, "-np", 2, "--cache-dir", cache)
    a1 = ids(400, 60)
    try:
        r1 = complete(srv, a1)
    finally:
        stop(srv)  # SIGTERM: the slot's memory goes to disk
    assert (next(cache.iterdir()) / "index.json").exists()
    srv = smol_server(binary, model, "-np", 2, "--cache-dir", cache)
    try:
        a2 = held(a1, r1) + r1["tokens"][-1:] + ids(12, 61)
        r2 = complete(srv, a2)
        assert r2["timings"]["cache_n"] == len(held(a1, r1)), r2["timings"]
        assert r2["timings"]["prompt_n"] == 13
        assert metric(srv, "prompt_cache_hits_total", '{tier="disk"}') == 1
        assert metric(srv, "prompt_cache_disk_reads_total") == 1
        assert probs(r2) == probs(complete(srv, a2, cache_prompt=False))
    finally:
        stop(srv)
    listing = subprocess.run([str(binary), "cache", "verify", str(cache), "--json"],
                             capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    entries = json.loads(listing.stdout)
    assert entries and all(e["ok"] and e["arch"] == "llama" for e in entries)
    assert len(held(a2, r2)) in [e["n_tokens"] for e in entries]


def test_a_missing_damaged_or_lying_index_is_rebuilt(binary, model, tmp_path):
    cache = tmp_path / "cache"
    a = ids(300, 70)
    srv = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
    try:
        r = complete(srv, a)
    finally:
        stop(srv)
    ns = next(cache.iterdir())
    index = json.loads((ns / "index.json").read_text())
    lying = dict(index)
    lying["entries"] = [dict(e, tokens=ids(len(e["tokens"]), 71)) for e in index["entries"]]
    for damage in ("lying", "missing", "garbage"):
        if damage == "missing":
            (ns / "index.json").unlink()
        elif damage == "garbage":
            (ns / "index.json").write_text('{"format": "mnemo prompt cache index", "ver')
        else:
            (ns / "index.json").write_text(json.dumps(lying))
        srv = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
        try:
            r2 = complete(srv, held(a, r) + [7])
            assert r2["timings"]["cache_n"] == len(held(a, r)), (damage, r2["timings"])
            if damage == "lying":  # the index's tokens are not served
                assert complete(srv, ids(64, 71))["timings"]["cache_n"] == 0
        finally:
            stop(srv)


def _write_state_copy(src, dst, damage):
    data = bytearray(src.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        data[len(data) // 2] ^= 0x55
    dst.write_bytes(bytes(data))


def test_damaged_truncated_and_other_model_entries_are_never_served(binary, model, tmp_path,
                                                                     models_dir):
    cache = tmp_path / "cache"
    a, b = ids(300, 80), ids(300, 81)
    srv = smol_server(binary, model, "-np", 2, "--cache-dir", cache)
    try:
        ra = complete(srv, a, id_slot=0)
        rb = complete(srv, b, id_slot=1)
    finally:
        stop(srv)
    ns = next(cache.iterdir())
    files = entry_files(cache)
    assert len(files) == 2
    # One entry damaged in its K/V rows (found by the restore's checksums), the other truncated
    # (found when the directory is indexed).
    _write_state_copy(files[0], files[0], "flipped")
    _write_state_copy(files[1], files[1], "truncated")
    (ns / "index.json").unlink()
    # And another model's entry under a name of this namespace.
    gemma = models_dir / "gemma-3-270m-Q4_K_M.gguf"
    other = tmp_path / "other"
    if gemma.exists():
        g = Server(binary, gemma, "-np", 1, "-c", 1024, "--cache-dir", other)
        try:
            complete(g, ids(100, 82), n=2)
        finally:
            stop(g)
        shutil.copy(entry_files(other)[0], ns / ("0" * 16 + ".state"))
    srv = smol_server(binary, model, "-np", 2, "--cache-dir", cache)
    try:
        ignored_at_start = metric(srv, "prompt_cache_ignored_total")
        assert ignored_at_start == (2 if gemma.exists() else 1)
        for prompt, r in ((a, ra), (b, rb)):
            cont = held(prompt, r) + [9]
            got = complete(srv, cont)
            assert got["timings"]["cache_n"] == 0, got["timings"]  # recomputed, not served
            assert probs(got) == probs(complete(srv, cont, cache_prompt=False))
        assert metric(srv, "prompt_cache_ignored_total") == ignored_at_start + 1
        assert srv.alive()
    finally:
        stop(srv)


def test_an_unusable_directory_or_a_full_disk_keeps_serving_from_ram(binary, model, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")

    def full_disk():
        # Every file the server writes may hold 64 KiB at most: entries (MBs) fail mid-write, as
        # on a full disk. Ignored SIGXFSZ makes the write return EFBIG instead of a signal.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))

    for cache_dir, preexec in ((not_a_dir / "cache", None), (tmp_path / "full", full_disk)):
        srv = smol_server(binary, model, "-np", 1, "--cache-dir", cache_dir, preexec_fn=preexec)
        try:
            a = ids(250, 90)
            r = complete(srv, a)
            complete(srv, ids(100, 91))
            r2 = complete(srv, held(a, r) + [3])
            assert r2["timings"]["cache_n"] == len(held(a, r))  # from RAM
            assert metric(srv, "prompt_cache_disk_errors_total") >= 1
            assert metric(srv, "prompt_cache_entries", '{tier="disk"}') == 0
            complete(srv, ids(100, 92))
            assert sum("disk tier failing" in line for line in srv.lines) == 1, srv.log()
        finally:
            stop(srv)
        if cache_dir.exists():
            assert not list(cache_dir.glob("*/*.state*")), list(cache_dir.glob("*/*"))


def test_two_servers_share_one_directory(binary, model, tmp_path):
    cache = tmp_path / "cache"
    s1 = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
    s2 = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
    convs = {}
    try:
        for i, srv in enumerate((s1, s2, s1, s2)):
            p = ids(200, 100 + i)
            convs[i] = (p, complete(srv, p))
    finally:
        stop(s1)
        stop(s2)
    s3 = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
    try:
        for i, (p, r) in convs.items():
            got = complete(s3, held(p, r) + [11])
            assert got["timings"]["cache_n"] == len(held(p, r)), (i, got["timings"])
    finally:
        stop(s3)
    assert subprocess.run([str(binary), "cache", "verify", str(cache)],
                          capture_output=True).returncode == 0


def test_entries_stored_in_a_cheaper_type(binary, model, tmp_path):
    sizes = {}
    for kind, extra in (("f16", []), ("q8_0", ["--prompt-cache-type-k", "q8_0",
                                               "--prompt-cache-type-v", "q8_0"])):
        cache = tmp_path / kind
        srv = smol_server(binary, model, "-np", 1, "--cache-dir", cache, *extra)
        try:
            a = ids(300, 120)
            r = complete(srv, a)
            complete(srv, ids(100, 121))
            r2 = complete(srv, held(a, r) + [4])
            # Restored and converted back to the slot's f16.
            assert r2["timings"]["cache_n"] == len(held(a, r))
        finally:
            stop(srv)
        sizes[kind] = max(f.stat().st_size for f in entry_files(cache))
    # q8_0 rows are 34 bytes per 32 elements against f16's 64.
    assert 0.5 < sizes["q8_0"] / sizes["f16"] < 0.56, sizes
    bad = subprocess.run([str(binary), "serve", "-m", str(model), "--prompt-cache-type-k", "q4_K"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "not a K/V cache type" in bad.stderr


def test_cache_command_lists_verifies_and_clears(binary, model, tmp_path):
    cache = tmp_path / "cache"
    srv = smol_server(binary, model, "-np", 1, "--cache-dir", cache)
    try:
        complete(srv, ids(200, 130), n=2)
    finally:
        stop(srv)
    out = subprocess.run([str(binary), "cache", "list", str(cache)], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "1 entries" in out.stdout, out.stdout
    f = entry_files(cache)[0]
    _write_state_copy(f, f, "flipped")
    assert subprocess.run([str(binary), "cache", "list", str(cache)]).returncode == 0
    bad = subprocess.run([str(binary), "cache", "verify", str(cache)], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "checksum" in bad.stdout, bad.stdout
    out = subprocess.run([str(binary), "cache", "clear", str(cache)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert not entry_files(cache) and cache.exists()
    missing = subprocess.run([str(binary), "cache", "list", str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "not a directory" in missing.stderr


def test_cache_clear_beside_a_running_server(binary, model, tmp_path):
    """`mnemo cache clear` on a directory a server uses deletes the entries and the index, never
    the lock nor a file being written; the server goes on (a deleted entry is a miss, not a disk
    error). With no server left, the namespace goes whole."""
    cache = tmp_path / "cache"
    srv = smol_server(binary, model, "-np", 1, "--cache-ram", 0, "--cache-dir", cache)
    try:
        a = ids(200, 140)
        r = complete(srv, a)
        complete(srv, ids(100, 141))  # takes the slot: a's memory goes to disk
        end = time.time() + 10
        while not entry_files(cache) and time.time() < end:
            time.sleep(0.05)
        ns = next(cache.iterdir())
        assert entry_files(cache) and (ns / ".lock").exists(), list(ns.iterdir())
        in_flight = ns / "0123456789abcdef.state.tmp.99999"  # as a write in progress names it
        in_flight.write_bytes(b"being written")
        out = subprocess.run([str(binary), "cache", "clear", str(cache)], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        assert (ns / ".lock").exists() and in_flight.exists(), list(ns.iterdir())
        assert "in use" in out.stdout, out.stdout
        assert not entry_files(cache) and not (ns / "index.json").exists()
        in_flight.unlink()
        r2 = complete(srv, held(a, r) + [5])  # its entry is gone: read again
        assert r2["timings"]["cache_n"] == 0, r2["timings"]
        complete(srv, ids(100, 142))  # a new entry is written as before
        assert metric(srv, "prompt_cache_disk_errors_total") == 0
        assert not any("disk tier failing" in line for line in srv.lines), srv.log()
    finally:
        stop(srv)
    assert entry_files(cache)
    out = subprocess.run([str(binary), "cache", "clear", str(cache)], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "in use" not in out.stdout, (out.stdout, out.stderr)
    assert cache.exists() and not list(cache.iterdir())


# --- other memories ----------------------------------------------------------------------------


def test_gemma3_sliding_window_continues_after_its_slot_was_taken(binary, models_dir, tmp_path):
    gemma = models_dir / "gemma-3-270m-Q4_K_M.gguf"
    if not gemma.exists():
        pytest.skip("gemma-3-270m-Q4_K_M.gguf missing: run scripts/fetch-model")
    srv = Server(binary, gemma, "-np", 1, "-c", 2048, "--metrics", "--cache-dir", tmp_path)
    try:
        # Longer than the local layers' cells (the 512-token window plus one 512-token ubatch):
        # the slot's local layers have let go of the oldest positions.
        a1 = ids(1200, 140)
        r1 = complete(srv, a1, n=4)
        complete(srv, ids(100, 141), n=2)
        a2 = held(a1, r1) + r1["tokens"][-1:] + ids(8, 142)
        r2 = complete(srv, a2, n=4)
        assert r2["timings"]["cache_n"] == len(held(a1, r1)), r2["timings"]
        assert probs(r2) == probs(complete(srv, a2, n=4, cache_prompt=False))
        # A prompt that leaves the entry early would need the window before its cut, which the
        # entry no longer holds: recomputed.
        r3 = complete(srv, a1[:100] + ids(5, 143), n=2)
        assert r3["timings"]["cache_n"] == 0, r3["timings"]
    finally:
        stop(srv)


def test_gemma3_slot_file_longer_than_the_window_restores(binary, models_dir, tmp_path):
    """A slot file of a sliding-window sequence whose local layers have let go of its first
    positions restores and continues: only its last position says the cells hold the file's
    tokens (the sequence's first held position is past 0 in the local layers)."""
    gemma = models_dir / "gemma-3-270m-Q4_K_M.gguf"
    if not gemma.exists():
        pytest.skip("gemma-3-270m-Q4_K_M.gguf missing: run scripts/fetch-model")
    srv = Server(binary, gemma, "-np", 1, "-c", 2048, "--slot-save-path", tmp_path)
    try:
        a1 = ids(1200, 150)
        r1 = complete(srv, a1, n=4)
        r = requests.post(srv.url + "/slots/0?action=save", json={"filename": "long.bin"})
        assert r.status_code == 200, r.text
        assert r.json()["n_saved"] == len(held(a1, r1))
        assert requests.post(srv.url + "/slots/0?action=erase", json={}).status_code == 200
        r = requests.post(srv.url + "/slots/0?action=restore", json={"filename": "long.bin"})
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == len(held(a1, r1))
        a2 = held(a1, r1) + r1["tokens"][-1:] + ids(8, 151)
        r2 = complete(srv, a2, n=4)
        assert r2["timings"]["cache_n"] == len(held(a1, r1)), r2["timings"]
        assert probs(r2) == probs(complete(srv, a2, n=4, cache_prompt=False))
    finally:
        stop(srv)


@pytest.mark.parametrize("arch", ["mamba2", "granitehybrid"])
def test_recurrent_and_hybrid_entries_carry_their_checkpoints(binary, tiny_recurrent, arch,
                                                              tmp_path):
    """A recurrent state cannot forget a suffix: a continuation resumes from the entry's live
    state, a prompt that leaves the entry early from its newest checkpoint before the cut (at
    most one checkpoint interval re-read), after a restart too."""
    rng = random.Random(3)
    a1 = [rng.randrange(3, 512) for _ in range(300)]

    def serve():
        return Server(binary, tiny_recurrent[arch], "-np", 1, "-c", 1024, "--metrics",
                      "--cache-dir", tmp_path, "--rs-ckpt-every", 64, "--rs-ckpts", 8)

    srv = serve()
    try:
        r1 = complete(srv, a1)
        complete(srv, [rng.randrange(3, 512) for _ in range(80)])
        a2 = held(a1, r1) + r1["tokens"][-1:] + [5, 6, 7]
        r2 = complete(srv, a2)
        assert r2["timings"]["cache_n"] == len(held(a1, r1)), r2["timings"]
        fresh = complete(srv, a2, cache_prompt=False)
        assert r2["tokens"] == fresh["tokens"]
    finally:
        stop(srv)
    srv = serve()
    try:
        early = a1[:200] + [9, 9, 9]
        r3 = complete(srv, early)
        # Checkpoints after positions 63, 127, 191: resume at 192.
        assert r3["timings"]["cache_n"] == 192, r3["timings"]
        assert r3["tokens"] == complete(srv, early, cache_prompt=False)["tokens"]
    finally:
        stop(srv)
