"""Two `mnemo serve` replicas sharing memory through a real Redis (`--cache-store`), and the KV
events a router follows (`--kv-events`).

The tests start redis-server (Debian's, installed by scripts/setup) on a free loopback port, never
the system service. A conversation alternates turns between replica A and replica B: the other
replica reads only the new turn (timings.prompt_n) and answers exactly as the first replica does
on the same prompt (byte-equal log-probabilities). Redis killed mid-conversation: every request is
still answered; Redis back: sharing resumes within seconds. Redis paused (SIGSTOP): requests wait
no longer than the store timeout. Full store, damaged values and values of other conversations:
counted, never served; refused writes logged once without hiding the next outage; a deepest
entry gone or bad falls back to a shorter stored prefix; an ACL user authenticates by name.

The KV-event tests need no Redis. A ZeroMQ subscriber decodes the stream with msgspec structs
written from the field list of vLLM's `vllm/distributed/kv_events.py` (strict, unknown fields
forbidden; the older positional form with that file's former array_like structs) and checks it:
chained block hashes against XXH3 from the `xxhash` package, and the blocks held against what the
replica holds and evicted. vLLM's replay socket resends what a late subscriber missed. On Gemma 3
the sliding-window layers' group holds only the blocks they keep, and a router that applies vLLM's
rule to the published groups credits only prefixes the replica then serves from memory.

Prompts are token ids; after a request with prompt P that generated G a slot holds P + G[:-1].
"""
import shutil
import signal
import time
from typing import Any

import gguf
import msgspec
import pytest
import requests
import xxhash
import zmq

from helpers.cache import complete, held, ids, probs
from helpers.paths import GEMMA3
from helpers.redis_server import Redis, free_port
from helpers.server import Server, metric, stop

BLOCK = 64

# The replica tests that compare a served prefix's answers with a fresh read byte for byte are
# `kernels` (run again under every SIMD target); the outage and verification tests count
# hits and errors, and the KV-event tests count blocks.
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server missing: run scripts/setup")


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


@pytest.mark.kernels
@needs_redis
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


@needs_redis
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

        # A store that stops answering (SIGSTOP): requests wait at most about the timeout
        # (300 ms per lookup) beyond what the same work takes with the store answering (measured
        # just before, so a slow SIMD target or a busy machine does not count against it).
        control = complete(b, ids(200, 7), 2)
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            slow = complete(b, ids(200, 4), 2)
            assert slow["_seconds"] < control["_seconds"] + 1.5, (slow["_seconds"],
                                                                 control["_seconds"])
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        assert a.alive() and b.alive()
    finally:
        stop(a)
        stop(b)


@needs_redis
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


@pytest.mark.kernels
@needs_redis
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


@needs_redis
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


@needs_redis
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



# --- KV events (no Redis) ------------------------------------------------------------------------
# The structs of vLLM's vllm/distributed/kv_events.py, written from its field list (block hashes:
# mnemo sends unsigned 64-bit integers, one of the two types vLLM's ExternalBlockHash allows).
# forbid_unknown_fields: mnemo may send nothing beyond that list.


class EventBatch(msgspec.Struct, omit_defaults=True, gc=False, forbid_unknown_fields=True):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True,
                   forbid_unknown_fields=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


# The same file before its structs dropped array_like (`--kv-events-format legacy`).
class LegacyEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True,
                  forbid_unknown_fields=True):
    pass


class LegacyBlockStored(LegacyEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class LegacyBlockRemoved(LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class LegacyAllBlocksCleared(LegacyEvent, tag="AllBlocksCleared"):
    pass


class LegacyEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False,
                       forbid_unknown_fields=True):
    ts: float
    events: list[LegacyBlockStored | LegacyBlockRemoved | LegacyAllBlocksCleared]


DECODE = msgspec.msgpack.Decoder(KVEventBatch)  # strict (the default): no type coercion
DECODE_LEGACY = msgspec.msgpack.Decoder(LegacyEventBatch)


def endpoint():
    return f"tcp://127.0.0.1:{free_port()}"


def events_replica(binary, model, *args):
    return Server(binary, model, "-np", 1, "-c", 4096, "--metrics", *args)


def receive(sub, quiet=1.0, timeout=10.0):
    """(seq, payload) messages from `sub` until none came for `quiet` seconds."""
    out = []
    end = time.time() + timeout
    while time.time() < end:
        if sub.poll(int(quiet * 1000)):
            topic, seq, payload = sub.recv_multipart()
            assert topic == b""
            out.append((int.from_bytes(seq, "big"), payload))
        elif out:
            break
    return out


def replay(ep, start):
    """vLLM's replay request from a DEALER (it sends the empty delimiter frame a REQ socket adds):
    the (seq, payload) batches from `start` on, up to the end marker (seq -1, empty payload)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10000)
    out = []
    try:
        sock.connect(ep)
        sock.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            delim, seq, payload = sock.recv_multipart()
            assert delim == b""
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == -1:
                assert payload == b""
                return out
            out.append((seq, payload))
    finally:
        sock.close()
        ctx.term()


def replay_settled(ep):
    """replay(ep, 0) once the replica published what its last answer changed (it does so just
    after the answer): two replays 0.2 s apart agree."""
    last = replay(ep, 0)
    for _ in range(50):
        time.sleep(0.2)
        now = replay(ep, 0)
        if now == last:
            return now
        last = now
    raise AssertionError("the event stream does not settle")


class HeldBlocks:
    """The blocks a router knows a replica holds, per (medium, group), from the events in order;
    every event checked on the way (chains against XXH3, no block stored twice or removed
    unstored)."""

    def __init__(self):
        self.live = {}        # (medium, group_idx) -> set of hashes
        self.groups = {}      # group_idx -> (kv_cache_spec_kind, kv_cache_spec_sliding_window)
        self.tokens_of = {}   # hash -> its block's tokens
        self.cleared = 0

    def apply(self, events):
        for e in events:
            if isinstance(e, AllBlocksCleared):
                self.cleared += 1
                self.live = {}
            elif isinstance(e, BlockStored):
                assert e.block_size == BLOCK and e.lora_id is None and e.lora_name is None
                assert e.extra_keys is None and e.group_idx is not None
                assert len(e.token_ids) == len(e.block_hashes) * BLOCK
                assert chain_ok(e.block_hashes, e.parent_block_hash, e.token_ids), e
                spec = (e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window)
                assert self.groups.setdefault(e.group_idx, spec) == spec
                live = self.live.setdefault((e.medium, e.group_idx), set())
                for i, h in enumerate(e.block_hashes):
                    assert h not in live, "stored twice without a removal"
                    live.add(h)
                    self.tokens_of[h] = e.token_ids[i * BLOCK:(i + 1) * BLOCK]
            else:
                assert isinstance(e, BlockRemoved) and e.group_idx is not None
                live = self.live.setdefault((e.medium, e.group_idx), set())
                for h in e.block_hashes:
                    assert h in live, "removed a block that was not stored"
                    live.discard(h)

    def get(self, medium, group=0):
        return self.live.get((medium, group), set())

    def chain(self, tokens):
        """The published hashes of `tokens`' full blocks, in order, as far as they are known."""
        by_tokens = {tuple(t): h for h, t in self.tokens_of.items()}
        out = []
        for i in range(len(tokens) // BLOCK):
            h = by_tokens.get(tuple(tokens[i * BLOCK:(i + 1) * BLOCK]))
            if h is None:
                break
            out.append(h)
        return out


def decode_all(messages):
    """Batches decoded strictly, their sequence numbers checked (no gap)."""
    seqs = [s for s, _ in messages]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    batches = [DECODE.decode(p) for _, p in messages]
    for b in batches:
        assert b.ts > 1.6e9 and b.data_parallel_rank == 0
    return [e for b in batches for e in b.events]


def test_kv_events_follow_what_a_replica_holds(binary, model, tmp_path):
    ep = endpoint()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    a = events_replica(binary, model, "--kv-events", ep, "--slot-save-path", tmp_path)
    try:
        sub.connect(ep)
        time.sleep(0.3)  # a PUB socket drops what it sends before the subscriber is connected
        p = ids(300, 40)
        r = complete(a, p)
        p2 = held(p, r) + [9] + ids(40, 41)
        r2 = complete(a, p2)  # the same slot goes on: blocks added, none removed
        holding = held(p2, r2)
        assert requests.post(a.url + "/slots/0?action=erase", json={},
                             timeout=30).status_code == 200
        messages = receive(sub)
    finally:
        stop(a)
        sub.close()
        ctx.term()
    assert messages, "no events"
    blocks = HeldBlocks()
    blocks.apply(decode_all(messages))
    # One group (no sliding window): full attention.
    assert blocks.groups == {0: ("full_attention", None)}
    # The erase emptied the slot: nothing left in the slot medium. The erased memory went into the
    # prompt cache: its blocks are held there, exactly the slot's full blocks.
    assert blocks.get("CPU") == set()
    n_blocks = len(holding) // BLOCK
    held_blocks = [holding[i * BLOCK:(i + 1) * BLOCK] for i in range(n_blocks)]
    in_cache = [blocks.tokens_of[h] for h in blocks.get("CPU_CACHE")]
    for blk in held_blocks:
        assert blk in in_cache
    assert len(in_cache) == n_blocks


def test_kv_events_legacy_form(binary, model):
    """`--kv-events-format legacy`: older vLLM's positional arrays, the same blocks."""
    ep = endpoint()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    a = events_replica(binary, model, "--kv-events", ep, "--kv-events-format", "legacy")
    try:
        sub.connect(ep)
        time.sleep(0.3)
        p = ids(200, 42)
        r = complete(a, p)
        messages = receive(sub)
    finally:
        stop(a)
        sub.close()
        ctx.term()
    assert messages, "no events"
    live = set()
    for _, payload in messages:
        batch = DECODE_LEGACY.decode(payload)
        assert batch.ts > 1.6e9
        for e in batch.events:
            if isinstance(e, LegacyBlockStored):
                assert e.block_size == BLOCK and e.lora_id is None and e.medium == "CPU"
                assert chain_ok(e.block_hashes, e.parent_block_hash, e.token_ids)
                live.update(e.block_hashes)
    assert len(live) == len(held(p, r)) // BLOCK
    # The map form is not what was sent.
    with pytest.raises(msgspec.ValidationError):
        DECODE.decode(messages[-1][1])


def test_kv_events_replay_resends_what_a_subscriber_missed(binary, model):
    ep, rep = endpoint(), endpoint()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    a = events_replica(binary, model, "--kv-events", ep, "--kv-events-replay", rep)
    try:
        complete(a, ids(200, 43))  # before anyone subscribed: lost on the PUB socket
        sub.connect(ep)
        time.sleep(0.3)
        complete(a, ids(150, 44))
        live = receive(sub)
        assert live and live[0][0] > 0, live  # batch 0 (AllBlocksCleared) went unheard
        again = replay(rep, 0)
        # A REQ socket, as vLLM's example subscriber uses: the first answer arrives.
        req = ctx.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        req.setsockopt(zmq.RCVTIMEO, 10000)
        req.connect(rep)
        req.send(live[0][0].to_bytes(8, "big"))
        first = req.recv_multipart()
        req.close()
        tail = replay(rep, live[-1][0])
    finally:
        stop(a)
        sub.close()
        ctx.term()
    # Replayed: every batch from 0, byte-equal to what was published.
    assert [s for s, _ in again] == list(range(len(again)))
    assert dict(again) | dict(live) == dict(again)
    events = decode_all(again)
    assert isinstance(events[0], AllBlocksCleared)
    HeldBlocks().apply(events)
    assert first == [live[0][0].to_bytes(8, "big"), live[0][1]]
    assert tail == [live[-1]]


def gemma_window(path):
    f = gguf.GGUFReader(str(path)).fields["gemma3.attention.sliding_window"]
    return int(f.parts[f.data[0]][0])


def router_credit(blocks, medium, tokens, window):
    """The longest prefix of `tokens` (in tokens) that a router applying vLLM's rule to the
    published groups counts as held in `medium`: group 0 holds all of its blocks and group 1 the
    ceil((window - 1) / BLOCK) blocks before its end."""
    chain = blocks.chain(tokens)
    full, local = blocks.get(medium, 0), blocks.get(medium, 1)
    n_window = -(-(window - 1) // BLOCK)
    best = 0
    for k in range(1, len(chain) + 1):
        if not all(h in full for h in chain[:k]):
            break
        if all(h in local for h in chain[max(0, k - n_window):k]):
            best = k * BLOCK
    return best


def test_kv_events_mark_what_sliding_window_layers_keep(binary, models_dir):
    """Gemma 3: 15 of 18 layers keep a 512-token window. Group 1 ("sliding_window") holds only
    the blocks those layers keep; what a router credits by vLLM's rule is served from memory,
    and a prefix it does not credit is not."""
    gemma = models_dir / GEMMA3
    if not gemma.exists():
        pytest.skip(f"{gemma} missing: run scripts/fetch-model")
    window = gemma_window(gemma)
    rep = endpoint()
    a = events_replica(binary, gemma, "--kv-events", endpoint(), "--kv-events-replay", rep)
    try:
        p = ids(2000, 45)
        r = complete(a, p)
        holding = held(p, r)
        blocks = HeldBlocks()
        blocks.apply(decode_all(replay_settled(rep)))
        assert blocks.groups == {0: ("full_attention", None), 1: ("sliding_window", window)}
        chain = blocks.chain(holding)
        assert len(chain) == len(holding) // BLOCK
        assert blocks.get("CPU", 0) == set(chain)
        local = blocks.get("CPU", 1)
        first = min(i for i, h in enumerate(chain) if h in local)
        # A suffix of the chain: not the first blocks (2,007 tokens, at most 1,024 local cells),
        # but every block inside the window of the next token.
        assert local == set(chain[first:]) and first > 0
        assert first * BLOCK <= len(holding) - window + 1
        credit = router_credit(blocks, "CPU", holding, window)
        assert credit == len(chain) * BLOCK
        assert router_credit(blocks, "CPU", holding[:4 * BLOCK], window) == 0

        # A prefix the router does not credit: the slot cannot continue it (its local layers
        # lost the window) and reads it again. Its memory goes into the prompt cache.
        early = complete(a, holding[:4 * BLOCK] + ids(40, 46))
        assert early["timings"]["cache_n"] == 0
        blocks.apply(decode_all(replay_settled(rep)))
        assert blocks.get("CPU_CACHE", 0) == set(chain)
        assert blocks.get("CPU_CACHE", 1) == set(chain[first:])
        # The credited prefix: served from the prompt cache entry, all of it.
        cached = router_credit(blocks, "CPU_CACHE", holding, window)
        assert cached == credit
        late = complete(a, holding[:cached] + ids(40, 47))
        assert late["timings"]["cache_n"] == cached, late["timings"]
    finally:
        stop(a)


def test_kv_events_legacy_form_withholds_what_a_window_cannot_serve(binary, models_dir):
    """Without groups, a sliding-window slot is published only while its local layers still hold
    the whole sequence (every prefix can be continued); past that, all of its blocks go."""
    gemma = models_dir / GEMMA3
    if not gemma.exists():
        pytest.skip(f"{gemma} missing: run scripts/fetch-model")
    ep = endpoint()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    a = events_replica(binary, gemma, "--kv-events", ep, "--kv-events-format", "legacy",
                       "--cache-ram", 0)
    try:
        sub.connect(ep)
        time.sleep(0.3)
        p = ids(300, 48)
        r = complete(a, p)
        short = receive(sub)
        long = held(p, r) + ids(1700, 49)
        complete(a, long)
        rest = receive(sub)
    finally:
        stop(a)
        sub.close()
        ctx.term()

    def stored_and_removed(messages):
        out = []
        for _, payload in messages:
            for e in DECODE_LEGACY.decode(payload).events:
                if not isinstance(e, LegacyAllBlocksCleared):
                    out.append((type(e).__name__, len(e.block_hashes)))
        return out

    n_short = len(held(p, r)) // BLOCK
    assert ("LegacyBlockStored", n_short) in stored_and_removed(short)
    # 2,000 tokens: the local layers keep at most 1,024 cells. Every published block is withdrawn
    # and none is published for the longer conversation.
    assert stored_and_removed(rest) == [("LegacyBlockRemoved", n_short)]
