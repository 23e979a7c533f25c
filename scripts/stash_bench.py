#!/usr/bin/env python3
"""What a stash costs the other slots: inter-token latency of generating slots while one idle
slot holding a long context is stashed into the prompt cache.

A server with --clients + 1 slots (split KV, each slot's stream --hold-tokens + 512 cells) is
started for the run. Each round:
  1. slot H (the last) reads a prompt of --hold-tokens random token ids (new ones every round,
     so nothing of it is in the prompt cache) and generates one token: it then holds the
     whole context, idle;
  2. "quiet": --clients streamed /completion requests (one per slot, greedy, ignore_eos,
     --n-predict tokens each) run together; once client 0 has received --stash-after tokens, a
     short request (one token) takes an empty slot: its prompt costs what it costs in 3;
  3. "stash": the same requests again; once client 0 has received --stash-after tokens, a new
     conversation (a short prompt, one token) takes slot H: its sequence is stashed into the
     prompt cache before it is dropped (as a turn's end with --cache-store stashes too).
Every token's arrival time is kept; the inter-token latencies (ITL) of all clients of a phase
are pooled. Printed per phase: ITL p50 / p99 / max, and for the stash phase the time of the
request that took slot H, the server's "stored in the prompt cache (... ms)" figure
(MNEMO_LOG=debug: the time to write the state, on the loop or on the stash thread) and the
slowest of each client's first three gaps after the stash began.

  scripts/stash_bench.py --model models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
      --hold-tokens 8192 --clients 4 --n-predict 160 --rounds 2
  # the prompt cache's own K/V types (the conversion runs in the stash):
  scripts/stash_bench.py ... --serve "--prompt-cache-type-k q8_0 --prompt-cache-type-v q8_0"

Loopback only; the server is this checkout's build/mnemo unless --binary says otherwise.
"""
import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import percentile  # noqa: E402 - scripts/load.py, beside this one

REPO = Path(__file__).resolve().parent.parent


class ServerProcess:
    """`mnemo serve` on a free loopback port; its log lines are kept (debug level)."""

    def __init__(self, args):
        n_slots = args.clients + 2
        cmd = [args.binary, "serve", "-m", args.model, "--port", "0", "--host", "127.0.0.1",
               "-np", str(n_slots), "-c", str((args.hold_tokens + 512) * n_slots),
               "--cache-ram", str(args.cache_ram), *shlex.split(args.serve)]
        env = dict(os.environ, MNEMO_LOG="debug")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines = []
        port = None
        end = time.time() + 300
        for line in self.proc.stderr:
            self.lines.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
            if time.time() > end:
                break
        if port is None:
            self.proc.kill()
            sys.exit("stash_bench.py: the server did not start: " + " ".join(cmd) + "\n" +
                     "".join(self.lines[-20:]))
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def stream_tokens(url, body, times, started):
    """One streamed /completion; appends each token event's arrival time to `times`."""
    started.wait()
    with requests.post(url + "/completion", json=body, stream=True, timeout=3600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(str(ev["error"]))
            if ev.get("stop"):
                return
            times.append(time.perf_counter())


def phase(url, args, rnd, take_slot, stash):
    """The clients' streams together; mid-way a short request takes slot `take_slot` (slot H,
    stashed, when `stash`; an empty slot otherwise, so both phases carry the same extra prompt).
    Returns the pooled ITLs (s), the taking request's time (s) and when it was sent."""
    times = [[] for _ in range(args.clients)]
    started = threading.Event()
    errors = []

    def client(c):
        body = {"prompt": f"Round {rnd} client {c}: write a long story about the sea.",
                "n_predict": args.n_predict, "temperature": 0, "ignore_eos": True,
                "stream": True, "id_slot": c, "cache_prompt": False}
        try:
            stream_tokens(url, body, times[c], started)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    started.set()
    # Once client 0 has --stash-after tokens, a short request takes `take_slot`.
    while len(times[0]) < args.stash_after and any(t.is_alive() for t in threads):
        time.sleep(0.005)
    sent_at = time.perf_counter()
    r = requests.post(url + "/completion", timeout=600, json={
        "prompt": f"Round {rnd}: a new conversation.", "n_predict": 1, "id_slot": take_slot,
        "cache_prompt": True})
    take_s = time.perf_counter() - sent_at
    if r.status_code != 200:
        errors.append(RuntimeError(f"taking slot H: HTTP {r.status_code}: {r.text[:200]}"))
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    itl = [b - a for ts in times for a, b in zip(ts, ts[1:])]
    return itl, take_s, sent_at, times


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("MNEMO_BIN", str(REPO / "build/mnemo")))
    ap.add_argument("--model", default=str(REPO / "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--serve", default="", help="extra `mnemo serve` arguments")
    ap.add_argument("--clients", type=int, default=4, help="generating slots")
    ap.add_argument("--hold-tokens", type=int, default=8192, help="context of the stashed slot")
    ap.add_argument("--n-predict", type=int, default=160, help="tokens per generating request")
    ap.add_argument("--stash-after", type=int, default=40,
                    help="tokens client 0 has received when the stash is triggered")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache-ram", type=int, default=4096, help="--cache-ram MiB")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace", action="store_true",
                    help="also print client 0's gaps (ms) of each stash phase, in order")
    args = ap.parse_args()
    if not (1 <= args.clients <= 16 and 64 <= args.hold_tokens <= 131072
            and args.stash_after < args.n_predict):
        sys.exit("stash_bench.py: --clients in [1, 16], --hold-tokens in [64, 131072], "
                 "--stash-after below --n-predict")
    srv = ServerProcess(args)
    hold_slot = args.clients
    rng = random.Random(1)
    result = {"quiet": [], "stash": [], "take_ms": [], "stored_ms": [], "stall_itl_ms": []}
    try:
        n_vocab = requests.get(srv.url + "/props", timeout=10).json().get("n_vocab", 32000)
        for rnd in range(args.rounds):
            ids = [rng.randrange(100, min(n_vocab, 30000)) for _ in range(args.hold_tokens)]
            t0 = time.perf_counter()
            r = requests.post(srv.url + "/completion", timeout=3600, json={
                "prompt": ids, "n_predict": 1, "id_slot": hold_slot, "cache_prompt": True})
            r.raise_for_status()
            print(f"round {rnd}: slot {hold_slot} read {args.hold_tokens} tokens in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
            itl, _, _, _ = phase(srv.url, args, rnd, hold_slot + 1, stash=False)
            result["quiet"].extend(itl)
            n_lines = len(srv.lines)
            itl, take_s, sent_at, times = phase(srv.url, args, rnd, hold_slot, stash=True)
            result["stash"].extend(itl)
            if args.trace:
                t0 = times[0]
                print("round", rnd, "client 0 gaps (ms), * = after the stash began:",
                      " ".join(f"{(b - a) * 1000:.0f}{'*' if b >= sent_at else ''}"
                               for a, b in zip(t0, t0[1:])), file=sys.stderr)
            result["take_ms"].append(round(take_s * 1000, 1))
            # The slowest of each client's first 3 gaps ending after the taking request was sent.
            spans = [g for ts in times
                     for g in [b - a for a, b in zip(ts, ts[1:]) if b >= sent_at][:3]]
            result["stall_itl_ms"].append(round(max(spans) * 1000, 1) if spans else None)
            for line in srv.lines[n_lines:]:
                m = re.search(r"tokens stored in the prompt cache \((\d+) bytes, ([\d.]+) ms\)",
                              line)
                if m:
                    result["stored_ms"].append(float(m.group(2)))
                    result["stored_bytes"] = int(m.group(1))
    finally:
        srv.stop()
    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    summary = {
        "clients": args.clients, "hold_tokens": args.hold_tokens, "rounds": args.rounds,
        "quiet_itl_ms": {p: ms(percentile(result["quiet"], p)) for p in (50, 90, 99, 100)},
        "stash_itl_ms": {p: ms(percentile(result["stash"], p)) for p in (50, 90, 99, 100)},
        "taking_request_ms": result["take_ms"], "stash_write_ms": result["stored_ms"],
        "stash_bytes": result.get("stored_bytes"), "slowest_gap_after_stash_ms":
        result["stall_itl_ms"],
    }
    summary["p99_ratio"] = round(summary["stash_itl_ms"][99] / summary["quiet_itl_ms"][99], 3)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for k, v in summary.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
