"""Two `mnemo serve` replicas sharing memory through a real Redis (`--cache-store`), and the KV
events a router follows (`--kv-events`).

The tests start redis-server (Debian's, installed by scripts/setup) on a free loopback port, never
the system service. A conversation alternates turns between replica A and replica B: the other
replica reads only the new turn (timings.prompt_n) and answers exactly as the first replica does
on the same prompt (byte-equal log-probabilities). Redis killed mid-conversation: every request is
still answered; Redis back: sharing resumes within seconds. Redis paused (SIGSTOP): requests wait
no longer than the store timeout. Full store, damaged values and values of other conversations:
counted, never served; refused writes logged once without hiding the next outage; a deepest
entry gone or bad falls back to a shorter stored prefix; an ACL user authenticates by name. A ZeroMQ subscriber checks the event stream: chained block hashes against
XXH3 from the `xxhash` package, and the blocks held against what the replica holds and evicted.

Prompts are token ids; after a request with prompt P that generated G a slot holds P + G[:-1].
"""
import shutil
import signal
import socket
import subprocess
import time

import msgpack
import pytest
import requests
import xxhash
import zmq

from helpers.cache import complete, held, ids, probs
from helpers.server import Server, metric, stop

BLOCK = 64

pytestmark = [pytest.mark.kernels,
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server missing: run scripts/setup")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A redis-server of our own on a loopback port (no persistence)."""

    def __init__(self, port=None, *extra):
        self.port = port or free_port()
        self.extra = extra
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", *map(str, self.extra)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 10
        while time.time() < end:
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def cli(self, *args, stdin=None):
        r = subprocess.run(["redis-cli", "-p", str(self.port), *map(str, args)], input=stdin,
                           capture_output=True, timeout=10)
        return r.stdout.decode(errors="replace")

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def url(self):
        return f"redis://127.0.0.1:{self.port}"


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.kill()


def wait_for(pred, timeout=10.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def replica(binary, model, redis_url, *args):
    return Server(binary, model, "-np", 1, "-c", 4096, "--metrics", "--cache-store", redis_url,
                  "--cache-store-timeout", 300, *args)


def turn(srv, prompt, n=8):
    """One turn; returns once the replica has written the turn's memory to the store."""
    before = metric(srv, "prompt_cache_store_writes_total")
    r = complete(srv, prompt, n)
    wait_for(lambda: metric(srv, "prompt_cache_store_writes_total") > before and
             metric(srv, "prompt_cache_store_pending") == 0, what="the turn to reach the store")
    return r


def test_a_conversation_alternates_between_two_replicas(binary, model, redis):
    a = replica(binary, model, redis.url())
    b = replica(binary, model, redis.url())
    turns = []
    try:
        prompt = ids(300, 1)
        r = turn(a, prompt)
        for i, srv in enumerate((b, a, b, a)):
            prompt = held(prompt, r) + r["tokens"][-1:] + ids(20, 10 + i)
            r = turn(srv, prompt)
            t = r["timings"]
            assert t["prompt_n"] == 21, (i, t)  # only the new turn (and the last reply token)
            assert t["cache_n"] == len(prompt) - 21
            turns.append((prompt, r))
        for srv in (a, b):
            assert metric(srv, "prompt_cache_hits_total", '{tier="store"}') == 2
            assert metric(srv, "prompt_cache_store_up") == 1
    finally:
        stop(a)
        stop(b)
    # Every turn answered as a server that reads the whole prompt answers it.
    fresh = Server(binary, model, "-np", 1, "-c", 4096)
    try:
        for prompt, r in turns:
            assert probs(r) == probs(complete(fresh, prompt, cache_prompt=False))
    finally:
        stop(fresh)


def test_redis_down_slow_or_back(binary, model, redis):
    a = replica(binary, model, redis.url())
    b = replica(binary, model, redis.url())
    try:
        prompt = ids(250, 2)
        r = turn(a, prompt)
        redis.kill()  # mid-conversation
        prompt = held(prompt, r) + r["tokens"][-1:] + ids(10, 20)
        r = complete(b, prompt)  # answered without the store: recomputed
        assert r["timings"]["cache_n"] == 0
        r = complete(a, held(prompt, r) + r["tokens"][-1:] + ids(10, 21))
        assert r["timings"]["cache_n"] > 0  # its own slot still serves it
        wait_for(lambda: metric(a, "prompt_cache_store_up") == 0, what="A to see the outage")
        assert metric(a, "prompt_cache_store_errors_total") >= 1
        assert sum("cache store:" in line for line in a.lines) == 1, a.log()

        redis.start()  # the same port: sharing resumes within seconds
        end = time.time() + 10
        while metric(a, "prompt_cache_store_up") == 0:  # reconnected at its next command
            complete(a, ids(100, 50 + int(time.time() * 10) % 1000), 2)
            assert time.time() < end, a.log()
            time.sleep(0.2)
        wait_for(lambda: redis.cli("DBSIZE").strip() != "0", what="A's first write")
        p2 = ids(250, 3)
        r2 = turn(a, p2 + [5], 4)
        nxt = held(p2 + [5], r2) + [6]
        got = complete(b, nxt)
        assert got["timings"]["cache_n"] == len(held(p2 + [5], r2)), got["timings"]
        assert any("connected again" in line for line in a.lines), a.log()

        # A store that stops answering (SIGSTOP): requests wait at most about the timeout.
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            slow = complete(b, ids(200, 4), 2)
            assert slow["_seconds"] < 3, slow["_seconds"]
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        assert a.alive() and b.alive()
    finally:
        stop(a)
        stop(b)


def test_fetched_values_are_verified_and_a_full_store_drops_writes(binary, model, redis):
    a = replica(binary, model, redis.url())
    b = replica(binary, model, redis.url())
    try:
        p1, p2 = ids(200, 5), ids(200, 6)
        r1 = turn(a, p1)
        r2 = turn(a, p2)
        keys = redis.cli("--scan", "--pattern", "mnemo:*:e:*").split()
        assert len(keys) == 2, keys
        # Swap the two entries' values: each key now holds another conversation's memory (valid
        # checksums, this model, tokens that do not match the block hashes that lead to it).
        tmp0 = keys[0] + ":tmp"
        redis.cli("RENAME", keys[0], tmp0)
        redis.cli("RENAME", keys[1], keys[0])
        redis.cli("RENAME", tmp0, keys[1])
        for p, r in ((p1, r1), (p2, r2)):
            nxt = held(p, r) + [7]
            got = complete(b, nxt)
            assert got["timings"]["cache_n"] == 0, got["timings"]  # never served
            assert probs(got) == probs(complete(a, nxt, cache_prompt=False))
        assert metric(b, "prompt_cache_store_ignored_total") == 2
    finally:
        stop(a)
        stop(b)
    # Damaged values: the checksums fail on a replica that has nothing of its own.
    for k in keys:
        redis.cli("SET", k, "not a mnemo state " * 100)
    c = replica(binary, model, redis.url())
    try:
        got = complete(c, held(p1, r1) + [8])
        assert got["timings"]["cache_n"] == 0
        assert metric(c, "prompt_cache_store_ignored_total") == 1
    finally:
        stop(c)
    # A full store (maxmemory, no eviction): writes are refused and counted, requests go on.
    full = Redis(None, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    a = replica(binary, model, full.url())
    try:
        for i in range(3):
            complete(a, ids(200, 30 + i), 2)
        wait_for(lambda: metric(a, "prompt_cache_store_dropped_total") >= 1,
                 what="a refused write")
        assert metric(a, "prompt_cache_store_writes_total") == 0
        assert metric(a, "prompt_cache_store_up") == 1
    finally:
        stop(a)
        full.kill()


def test_a_missing_or_bad_deepest_entry_falls_back_to_a_shorter_prefix(binary, model, redis):
    """The deepest block pointer of a prompt leads to an entry that is gone (evicted) or bad: the
    lookup follows the next-shallower pointer that leads elsewhere and serves that prefix, and
    counts no miss."""
    a = replica(binary, model, redis.url())
    cases = {}
    try:
        for k, damage in enumerate(("gone", "bad")):
            system = ids(150, 90 + k)  # two full blocks, then 22 tokens into the third
            x, y = system + ids(150, 92 + k), system + ids(150, 94 + k)
            before = set(redis.cli("--scan", "--pattern", "mnemo:*:e:*").split())
            rx = turn(a, x)
            (entry_x,) = set(redis.cli("--scan", "--pattern", "mnemo:*:e:*").split()) - before
            turn(a, y)  # its entry takes over the pointers of the two system blocks
            cases[damage] = (system, held(x, rx) + [5], entry_x)
    finally:
        stop(a)
    for damage, (system, nxt, entry_x) in cases.items():
        if damage == "gone":
            redis.cli("DEL", entry_x)
        else:
            redis.cli("SET", entry_x, "not a mnemo state " * 100)
        b = replica(binary, model, redis.url())  # nothing of its own
        try:
            got = complete(b, nxt)
            assert got["timings"]["cache_n"] == len(system), (damage, got["timings"])
            assert metric(b, "prompt_cache_store_hits_total") == 1
            assert metric(b, "prompt_cache_store_misses_total") == 0
            assert metric(b, "prompt_cache_store_ignored_total") == (damage == "bad")
            assert probs(got) == probs(complete(b, nxt, cache_prompt=False))
        finally:
            stop(b)


def test_an_acl_user_authenticates_by_name(binary, model, redis):
    """redis://user:password@host authenticates as that ACL user (AUTH user password); a wrong
    password is refused, counted and logged without the password."""
    redis.cli("ACL", "SETUSER", "alice", "on", ">s3cret", "~mnemo:*", "+@all")
    # The default user keeps no password: AUTH with the password alone is refused.
    a = replica(binary, model, f"redis://alice:s3cret@127.0.0.1:{redis.port}")
    try:
        turn(a, ids(200, 60))
        assert metric(a, "prompt_cache_store_up") == 1
        assert "user=alice" in redis.cli("CLIENT", "LIST")
    finally:
        stop(a)
    assert "s3cret" not in a.log()
    b = replica(binary, model, f"redis://alice:n0tit@127.0.0.1:{redis.port}")
    try:
        complete(b, ids(200, 61), 2)
        wait_for(lambda: metric(b, "prompt_cache_store_errors_total") >= 1,
                 what="the refused AUTH")
        assert metric(b, "prompt_cache_store_up") == 0
        assert any("AUTH refused" in line for line in b.lines), b.log()
        assert "n0tit" not in b.log()
    finally:
        stop(b)


def test_a_refused_write_is_logged_once_and_the_next_outage_still_is(binary, model):
    full = Redis(None, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    a = replica(binary, model, full.url())
    try:
        for i in range(3):
            complete(a, ids(200, 130 + i), 2)
        wait_for(lambda: metric(a, "prompt_cache_store_dropped_total") >= 3,
                 what="three refused writes")
        assert sum("write refused" in line for line in a.lines) == 1, a.log()
        assert metric(a, "prompt_cache_store_up") == 1
        full.kill()  # a real outage after the refusals: it is logged too
        complete(a, ids(200, 140), 2)
        wait_for(lambda: metric(a, "prompt_cache_store_up") == 0, what="A to see the outage")
        outage = [line for line in a.lines
                  if "cache store:" in line and "write refused" not in line]
        assert len(outage) == 1, a.log()
    finally:
        stop(a)
        full.kill()


def chain_ok(hashes, parent, tokens):
    """Every block hash is XXH3-64 of its tokens seeded with the previous block's hash."""
    for i, h in enumerate(hashes):
        block = tokens[i * BLOCK:(i + 1) * BLOCK]
        seed = hashes[i - 1] if i > 0 else parent
        if seed is None:
            continue  # the first block of a chain hangs off the model's root
        data = b"".join(t.to_bytes(4, "little", signed=True) for t in block)
        if xxhash.xxh3_64_intdigest(data, seed=seed) != h:
            return False
    return True


def test_kv_events_follow_what_a_replica_holds(binary, model, redis, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    a = replica(binary, model, redis.url(), "--kv-events", endpoint, "--slot-save-path", tmp_path)
    batches = []
    try:
        sub.connect(endpoint)
        time.sleep(0.3)  # a PUB socket drops what it sends before the subscriber is connected
        p = ids(300, 40)
        r = complete(a, p)
        p2 = held(p, r) + [9] + ids(40, 41)
        r2 = complete(a, p2)  # the same slot goes on: blocks added, none removed
        holding = held(p2, r2)
        assert requests.post(a.url + "/slots/0?action=erase", json={},
                             timeout=30).status_code == 200
        end = time.time() + 5
        while time.time() < end:
            if sub.poll(200):
                topic, seq, payload = sub.recv_multipart()
                batches.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload)))
            elif batches:
                break
    finally:
        stop(a)
        sub.close()
        ctx.term()
    assert batches, "no events"
    seqs = [s for s, _ in batches]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap
    live = {"CPU": set(), "CPU_CACHE": set()}
    tokens_of = {}
    for _, (ts, events) in batches:
        assert ts > 1.6e9
        for e in events:
            if e[0] == "BlockStored":
                _, hashes, parent, toks, size, lora, medium = e
                assert size == BLOCK and lora is None and len(toks) == len(hashes) * BLOCK
                assert chain_ok(hashes, parent, toks), e
                for i, h in enumerate(hashes):
                    assert h not in live[medium], "stored twice without a removal"
                    live[medium].add(h)
                    tokens_of[h] = toks[i * BLOCK:(i + 1) * BLOCK]
            elif e[0] == "BlockRemoved":
                _, hashes, medium = e
                for h in hashes:
                    assert h in live[medium], "removed a block that was not stored"
                    live[medium].discard(h)
            else:
                assert e == ["AllBlocksCleared"]
    # The erase emptied the slot: nothing left in the slot medium. The erased memory went into the
    # prompt cache: its blocks are held there, exactly the slot's full blocks.
    assert live["CPU"] == set()
    n_blocks = len(holding) // BLOCK
    held_blocks = [holding[i * BLOCK:(i + 1) * BLOCK] for i in range(n_blocks)]
    in_cache = [tokens_of[h] for h in live["CPU_CACHE"]]
    for blk in held_blocks:
        assert blk in in_cache
