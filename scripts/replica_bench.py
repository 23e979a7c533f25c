#!/usr/bin/env python3
"""Next-turn TTFT on another replica: shared memory through Redis against reading the prompt.

Starts a redis-server on a free loopback port (no persistence) and two `mnemo serve` replicas
sharing it (`--cache-store`). For each context length N: replica A reads a conversation of N
tokens (token ids) and answers one token; once A has written that turn to the store, the next turn
(N + 32 new tokens) goes to replica B, which restores the conversation from the store and decodes
only the new tokens. The same next turn is then sent to B again with cache_prompt: false, which
reads all N + 32 tokens. Reported: time to the first streamed token of each, the state's size in
the store, and their ratio. Median of --rounds rounds (each round a new conversation).

  scripts/replica_bench.py --contexts 1024,4096,16384 --rounds 3 [--serve "EXTRA ARGS"]
"""
import argparse
import json
import os
import random
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(binary, model, args):
    port = free_port()
    cmd = [binary, "serve", "-m", model, "--port", str(port), "--metrics", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    end = time.time() + 120
    while time.time() < end:
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    sys.exit("replica_bench.py: a replica did not start: " + " ".join(cmd))


def metric(url, name):
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f"mnemo_{name} "):
            return float(line.split()[-1])
    return 0.0


def ttft(url, prompt, cache_prompt):
    """Seconds to the first streamed token, and the final timings."""
    t0 = time.perf_counter()
    first, timings = None, None
    with requests.post(url + "/completion", json={
            "prompt": prompt, "n_predict": 2, "temperature": 0, "stream": True,
            "cache_prompt": cache_prompt}, stream=True, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if first is None:
                first = time.perf_counter()
            if ev.get("stop"):
                timings = ev.get("timings")
    return first - t0, timings


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("MNEMO_BIN", str(REPO / "build/mnemo")))
    ap.add_argument("--model", default=str(REPO / "models/SmolLM2-135M-Instruct-Q4_1.gguf"))
    ap.add_argument("--contexts", default="1024,4096,16384")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", default="", help="extra `mnemo serve` arguments for both replicas")
    args = ap.parse_args()
    contexts = [int(x) for x in args.contexts.split(",")]
    n_ctx = max(contexts) + 1024

    rport = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--proto-max-bulk-len", "1gb"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    common = ["-np", "1", "-c", str(n_ctx), "-t", str(args.threads), "--cache-store",
              f"redis://127.0.0.1:{rport}", "--cache-store-timeout", "5000",
              *shlex.split(args.serve)]
    a, a_url = start_replica(args.binary, args.model, common)
    b, b_url = start_replica(args.binary, args.model, common)
    rows = []
    try:
        for n in contexts:
            shared, recompute, sizes = [], [], []
            for rnd in range(args.rounds):
                rng = random.Random(n * 100 + rnd)
                turn1 = [rng.randrange(300, 20000) for _ in range(n)]
                before = metric(a_url, "prompt_cache_store_writes_total")
                ttft(a_url, turn1, True)
                end = time.time() + 600
                while (metric(a_url, "prompt_cache_store_writes_total") <= before or
                       metric(a_url, "prompt_cache_store_pending") > 0):
                    if time.time() > end:
                        sys.exit("replica_bench.py: the turn never reached the store")
                    time.sleep(0.05)
                # The store's copy: the newest entry written.
                out = subprocess.run(["redis-cli", "-p", str(rport), "--scan", "--pattern",
                                      "mnemo:*:e:*"], capture_output=True, text=True).stdout
                sizes.append(max(int(subprocess.run(
                    ["redis-cli", "-p", str(rport), "STRLEN", k], capture_output=True,
                    text=True).stdout) for k in out.split()))
                turn2 = turn1 + [rng.randrange(300, 20000) for _ in range(32)]
                t_shared, tm = ttft(b_url, turn2, True)
                assert tm and tm["cache_n"] >= n - 1, tm
                t_full, tm2 = ttft(b_url, turn2, False)
                assert tm2 and tm2["cache_n"] == 0, tm2
                shared.append(t_shared)
                recompute.append(t_full)
                subprocess.run(["redis-cli", "-p", str(rport), "FLUSHALL"], capture_output=True)
            row = {"context": n, "shared_ttft_s": statistics.median(shared),
                   "recompute_ttft_s": statistics.median(recompute),
                   "state_mib": max(sizes) / 2**20}
            row["speedup"] = row["recompute_ttft_s"] / row["shared_ttft_s"]
            rows.append(row)
            print(f"context {n:6d}: other replica, shared {row['shared_ttft_s'] * 1000:8.1f} ms | "
                  f"recompute {row['recompute_ttft_s'] * 1000:9.1f} ms | "
                  f"{row['speedup']:6.1f}x | state {row['state_mib']:.1f} MiB", flush=True)
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(60)
        redis.kill()
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
