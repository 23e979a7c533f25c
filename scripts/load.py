#!/usr/bin/env python3
"""Bounded load test for `mnemo serve` (or any server with llama.cpp's /completion).

N clients send streamed /completion requests back to back for T seconds, then stop by
themselves (requests in flight finish; each is bounded by --n-predict and a timeout). Prints
throughput (generated tokens/s, requests/s) and latency percentiles (time to first token, whole
request, time per generated token). Loopback only: any other host is refused.

  scripts/load.py --url http://127.0.0.1:8080 --clients 8 --seconds 30
  # start a server for the run (extra `mnemo serve` arguments in --serve), e.g. split vs unified:
  scripts/load.py --serve "-np 8 -c 8192" --clients 8 --seconds 30
  scripts/load.py --serve "-np 8 -c 8192 -kvu" --clients 8 --seconds 30

With --serve, the server's own CPU time (user + system, from /proc) is measured too: generated
tokens per CPU-second is far less sensitive than wall-clock throughput to other programs
competing for the same cores.

Every request has a distinct prompt (no prompt-cache hits unless --shared-words makes them share
a prefix) and ignore_eos, so each generates exactly --n-predict tokens.

Conversation mode (--conversations N): N multi-turn chats (/v1/chat/completions, streamed,
greedy) that share one system prompt (--system-words). Turn by turn, every conversation sends
its history plus a new user message (--clients at a time); the reply joins the history. Reports,
per turn, the prompt tokens the server decoded (timings.prompt_n), those it reused
(timings.cache_n) and TTFT percentiles. --restart-after K stops the server (SIGTERM) after turn K
and starts it again with the same arguments: a server whose prompt cache has a disk tier
(--cache-dir) continues every conversation; one without reads them again.

  scripts/load.py --serve "-np 4 -c 16384 --cache-dir /tmp/pc" --conversations 16 --turns 6 \
      --restart-after 3 --clients 4
  scripts/load.py --server-cmd "scripts/peer llama-server -m models/SmolLM2-135M-Instruct-Q4_1.gguf \
      -np 4 -c 16384 --port {port}" --conversations 16 --turns 6 --restart-after 3 --clients 4

Agent mode (--agent-turns N): one agent loop on /v1/chat/completions with one function tool
("add"), greedy: every turn sends the whole conversation so far, the model's tool call and the
tool's result appended (a server that returns the call as text gets the text and the result as
a user message, so the loop goes on alike). Reports per turn the wall time, the prompt tokens
decoded (timings.prompt_n) and reused (cache_n), the tokens generated, and whether the answer
was a parsed tool call. --tool-choice required (default) forces a call every turn.

  scripts/load.py --serve "-c 8192" --model models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
      --agent-turns 16
  scripts/load.py --server-cmd "scripts/peer llama-server --jinja -c 8192 -np 1 -t 2 \
      -m models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --port {port}" --agent-turns 16
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
WORDS = ("river mountain quiet lantern orbit copper meadow signal harbor velvet thunder garden "
         "pencil marble window crystal forest engine silver ladder ocean rocket candle winter "
         "bridge puzzle shadow violin desert island feather planet anchor meteor cactus tunnel").split()


def prompt_text(client, index, n_words, shared_words):
    shared = " ".join(WORDS[i % len(WORDS)] for i in range(shared_words))
    # The request's own words start right after the shared part, so prompts differ from there.
    own = " ".join(WORDS[(client * 7919 + index * 104729 + i * 31) % len(WORDS)]
                   for i in range(n_words))
    return f"{shared} Client {client} request {index}: {own}. Continue the story:"


def chat_text(seed, n_words):
    return " ".join(WORDS[(seed * 7919 + i * 31 + (i * i) % 17) % len(WORDS)]
                    for i in range(n_words))


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft, self.latency, self.tpot = [], [], []
        self.tokens = 0
        self.prompt_tokens = 0
        self.requests = 0
        self.errors = {}

    def error(self, what):
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1


def one_request(url, body, timeout, stats):
    t0 = time.perf_counter()
    first = None
    final = None
    try:
        with requests.post(url + "/completion", json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                stats.error(f"HTTP {r.status_code}")
                return
            for line in r.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    stats.error(ev["error"].get("type", "error"))
                    return
                if first is None and ev.get("content"):
                    first = time.perf_counter()
                if ev.get("stop"):
                    final = ev
    except requests.RequestException as e:
        stats.error(type(e).__name__)
        return
    t1 = time.perf_counter()
    if final is None:
        stats.error("no final event")
        return
    n = final.get("tokens_predicted", 0)
    with stats.lock:
        stats.requests += 1
        stats.tokens += n
        stats.prompt_tokens += final.get("tokens_evaluated", 0)
        stats.latency.append(t1 - t0)
        if first is not None:
            stats.ttft.append(first - t0)
            if n > 1:
                stats.tpot.append((t1 - first) / (n - 1))


def run_load(url, args):
    stats = Stats()
    deadline = time.perf_counter() + args.seconds

    def client(c):
        i = 0
        while time.perf_counter() < deadline:
            body = {"prompt": prompt_text(c, i, args.prompt_words, args.shared_words),
                    "n_predict": args.n_predict, "temperature": args.temperature,
                    "ignore_eos": True, "stream": True, "cache_prompt": True}
            one_request(url, body, args.timeout, stats)
            i += 1

    threads = [threading.Thread(target=client, args=(c,), daemon=True)
               for c in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.seconds + args.timeout + 5)
    wall = time.perf_counter() - t0
    return stats, wall


def cpu_seconds(pid):
    """User + system CPU time of a process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def check_loopback(url):
    host = urllib.parse.urlparse(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        sys.exit(f"load.py: {url} is not a loopback address; this script only loads loopback")


def start_server(args):
    binary = Path(args.binary)
    model = Path(args.model)
    cmd = [str(binary), "serve", "-m", str(model), "--port", "0", "--host", "127.0.0.1",
           "--metrics", *shlex.split(args.serve)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    end = time.time() + 120
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
        if time.time() > end:
            break
    if port is None:
        proc.kill()
        sys.exit("load.py: the server did not start: " + " ".join(cmd))
    # Keep draining its log so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, f"http://127.0.0.1:{port}"


def start_command(cmd_template):
    """Starts `cmd_template` with {port} replaced by a free loopback port; waits for /health."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = shlex.split(cmd_template.replace("{port}", str(port)))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    end = time.time() + 180
    while time.time() < end:
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    proc.kill()
    sys.exit("load.py: the server did not start: " + " ".join(cmd))


def chat_turn(url, messages, n_predict, timeout):
    """One streamed greedy chat turn: (reply text, ttft s, timings dict or None, error)."""
    body = {"messages": messages, "max_tokens": n_predict, "temperature": 0, "stream": True,
            "cache_prompt": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first, text, timings = None, [], None
    try:
        with requests.post(url + "/v1/chat/completions", json=body, stream=True,
                           timeout=timeout) as r:
            if r.status_code != 200:
                return None, None, None, f"HTTP {r.status_code}"
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    return None, None, None, ev["error"].get("type", "error")
                timings = ev.get("timings", timings)
                for ch in ev.get("choices", []):
                    piece = (ch.get("delta") or {}).get("content")
                    if piece:
                        if first is None:
                            first = time.perf_counter()
                        text.append(piece)
    except requests.RequestException as e:
        return None, None, None, type(e).__name__
    return "".join(text), (first or time.perf_counter()) - t0, timings, None


def run_conversations(args):
    """Conversation mode (module docstring). Returns the summary dict."""
    def start():
        if args.server_cmd:
            return start_command(args.server_cmd)
        return start_server(args)

    proc, url = start()
    system = "You are a careful assistant. Background notes: " + chat_text(0, args.system_words)
    convs = [[{"role": "system", "content": system}] for _ in range(args.conversations)]
    turns, errors = [], {}
    try:
        for turn in range(1, args.turns + 1):
            if args.restart_after and turn == args.restart_after + 1:
                proc.send_signal(15)
                proc.wait(120)
                proc, url = start()
            rec = {"turn": turn, "ttft": [], "prompt_n": 0, "cache_n": 0, "unreported": 0}
            lock = threading.Lock()
            todo = list(range(args.conversations))

            def client():
                while True:
                    with lock:
                        if not todo:
                            return
                        c = todo.pop(0)
                    msgs = convs[c] + [{"role": "user", "content":
                                        f"Question {turn} of chat {c}: " +
                                        chat_text(c * 100 + turn, args.user_words)}]
                    reply, ttft, timings, err = chat_turn(url, msgs, args.n_predict, args.timeout)
                    with lock:
                        if err:
                            errors[err] = errors.get(err, 0) + 1
                            continue
                        convs[c] = msgs + [{"role": "assistant", "content": reply}]
                        rec["ttft"].append(ttft)
                        if timings and "prompt_n" in timings:
                            rec["prompt_n"] += timings["prompt_n"]
                            rec["cache_n"] += timings.get("cache_n", 0)
                        else:
                            rec["unreported"] += 1

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            turns.append({"turn": turn, "prompt_n": rec["prompt_n"], "cache_n": rec["cache_n"],
                          "unreported": rec["unreported"],
                          "ttft_ms": {p: round(percentile(rec["ttft"], p) * 1000, 1)
                                      for p in (50, 90)}})
    finally:
        proc.terminate()
        proc.wait(60)
    return {"conversations": args.conversations, "turns": turns, "errors": errors,
            "prompt_n_total": sum(t["prompt_n"] for t in turns),
            "cache_n_total": sum(t["cache_n"] for t in turns)}


ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers and return the sum",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}


def run_agent(args):
    """Agent mode (module docstring). Returns the summary dict."""
    proc, url = start_command(args.server_cmd) if args.server_cmd else start_server(args)
    messages = [{"role": "user", "content": "Add 1 and 2, then add 3 to the result, then 4, and "
                                            "so on: call the add tool once per step."}]
    turns, total = [], 0
    try:
        for turn in range(1, args.agent_turns + 1):
            body = {"messages": messages, "tools": [ADD_TOOL], "tool_choice": args.tool_choice,
                    "parallel_tool_calls": False,
                    "temperature": 0, "max_tokens": args.n_predict, "cache_prompt": True}
            t0 = time.perf_counter()
            r = requests.post(url + "/v1/chat/completions", json=body, timeout=args.timeout)
            wall = time.perf_counter() - t0
            if r.status_code != 200:
                sys.exit(f"load.py: turn {turn}: HTTP {r.status_code}: {r.text[:300]}")
            j = r.json()
            msg = j["choices"][0]["message"]
            calls = msg.get("tool_calls") or []
            t = j.get("timings", {})
            turns.append({"turn": turn, "seconds": round(wall, 3), "prompt_n": t.get("prompt_n"),
                          "cache_n": t.get("cache_n"),
                          "generated": j.get("usage", {}).get("completion_tokens"),
                          "tool_call": bool(calls)})
            total += turn
            if calls:
                call = calls[0]
                messages += [{"role": "assistant", "content": msg.get("content"),
                              "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": call["id"],
                              "content": json.dumps({"sum": total})}]
            else:
                messages += [{"role": "assistant", "content": msg.get("content") or ""},
                             {"role": "user", "content": json.dumps({"sum": total})}]
    finally:
        proc.terminate()
        proc.wait(60)
    later = turns[1:] or turns
    return {"turns": turns, "seconds_total": round(sum(t["seconds"] for t in turns), 2),
            "seconds_per_later_turn": round(statistics.median(t["seconds"] for t in later), 3),
            "tool_calls": sum(t["tool_call"] for t in turns)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="server (loopback only)")
    ap.add_argument("--serve", default=None,
                    help="start `mnemo serve` with these extra arguments for the run")
    ap.add_argument("--binary", default=os.environ.get("MNEMO_BIN", str(REPO / "build/mnemo")))
    ap.add_argument("--model", default=str(REPO / "models/SmolLM2-135M-Instruct-Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--n-predict", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--prompt-words", type=int, default=60, help="own words per prompt")
    ap.add_argument("--shared-words", type=int, default=0,
                    help="words of a prefix every prompt shares (prompt-cache reuse)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per request")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--conversations", type=int, default=0,
                    help="conversation mode: this many multi-turn chats (module docstring)")
    ap.add_argument("--turns", type=int, default=6, help="conversation mode: turns per chat")
    ap.add_argument("--system-words", type=int, default=750,
                    help="conversation mode: words of the shared system prompt")
    ap.add_argument("--user-words", type=int, default=30,
                    help="conversation mode: words per user message")
    ap.add_argument("--restart-after", type=int, default=0,
                    help="conversation mode: restart the server after this turn (0: never)")
    ap.add_argument("--server-cmd", default=None,
                    help="start this command as the server ({port}: a free port), e.g. "
                         "llama-server through scripts/peer")
    ap.add_argument("--agent-turns", type=int, default=0,
                    help="agent mode: tool-call turns of one agent loop")
    ap.add_argument("--tool-choice", default="required", help="agent mode: tool_choice")
    args = ap.parse_args()
    if args.agent_turns:
        if args.serve is None and args.server_cmd is None:
            args.serve = ""
        summary = run_agent(args)
        if args.json:
            print(json.dumps(summary, indent=2))
            return
        print(f"agent loop: {args.agent_turns} turns, tool_choice {args.tool_choice}")
        print("turn | seconds | prompt tokens decoded | reused | generated | tool call")
        for t in summary["turns"]:
            print(f"{t['turn']:4d} | {t['seconds']:7.2f} | {t['prompt_n']!s:>21} | "
                  f"{t['cache_n']!s:>6} | {t['generated']!s:>9} | {t['tool_call']}")
        print(f"total {summary['seconds_total']} s; median of turns 2..: "
              f"{summary['seconds_per_later_turn']} s; {summary['tool_calls']} parsed tool calls")
        return
    if args.conversations:
        if args.serve is None and args.server_cmd is None:
            sys.exit("load.py: conversation mode starts its own server: --serve or --server-cmd")
        if args.serve is None:
            args.serve = ""
        summary = run_conversations(args)
        if args.json:
            print(json.dumps(summary, indent=2))
            return
        print(f"{args.conversations} conversations x {args.turns} turns, {args.clients} at a time"
              + (f", restart after turn {args.restart_after}" if args.restart_after else ""))
        print("turn | prompt tokens decoded | reused | TTFT p50 / p90 (ms)")
        for t in summary["turns"]:
            print(f"{t['turn']:4d} | {t['prompt_n']:21d} | {t['cache_n']:6d} | "
                  f"{t['ttft_ms'][50]} / {t['ttft_ms'][90]}"
                  + (f" ({t['unreported']} without timings)" if t["unreported"] else ""))
        print(f"total decoded {summary['prompt_n_total']}, reused {summary['cache_n_total']}, "
              f"errors {summary['errors'] or 0}")
        return
    if not (1 <= args.clients <= 256 and 0 < args.seconds <= 3600 and 1 <= args.n_predict <= 4096):
        sys.exit("load.py: --clients in [1, 256], --seconds in (0, 3600], --n-predict in [1, 4096]")

    proc = None
    url = args.url
    if args.serve is not None:
        proc, url = start_server(args)
    check_loopback(url)
    try:
        props = requests.get(url + "/props", timeout=10).json()
        cpu0 = cpu_seconds(proc.pid) if proc is not None else None
        stats, wall = run_load(url, args)
        cpu1 = cpu_seconds(proc.pid) if proc is not None else None
        cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        steps = None
        if proc is not None:  # a fresh server: its counters cover exactly this run
            m = re.search(r"^mnemo_decode_steps_total (\S+)$",
                          requests.get(url + "/metrics", timeout=10).text, re.M)
            steps = float(m.group(1)) if m else None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)

    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    summary = {
        "server": {k: props.get(k) for k in ("model", "memory_mode", "total_slots", "n_ctx",
                                             "n_threads", "kv_policy")},
        "clients": args.clients, "seconds": round(wall, 1), "n_predict": args.n_predict,
        "requests": stats.requests, "errors": stats.errors,
        "generated_tokens": stats.tokens, "prompt_tokens": stats.prompt_tokens,
        "gen_tok_per_s": round(stats.tokens / wall, 1),
        "prompt_tok_per_s": round(stats.prompt_tokens / wall, 1),
        "req_per_s": round(stats.requests / wall, 2),
        "ttft_ms": {p: ms(percentile(stats.ttft, p)) for p in (50, 90, 99)},
        "latency_ms": {p: ms(percentile(stats.latency, p)) for p in (50, 90, 99)},
        "per_token_ms": {p: ms(percentile(stats.tpot, p)) for p in (50, 90, 99)},
        "decode_steps": steps,
        "server_cpu_s": round(cpu, 1) if cpu is not None else None,
        "gen_tok_per_cpu_s": round(stats.tokens / cpu, 1) if cpu else None,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    s = summary["server"]
    print(f"server: {s['model']} | {s['memory_mode']} KV | {s['total_slots']} slots | "
          f"n_ctx {s['n_ctx']} | {s['n_threads']} threads")
    print(f"load:   {args.clients} clients x {wall:.1f} s | {args.prompt_words + 8}-ish word "
          f"prompts | {args.n_predict} tokens each")
    print(f"done:   {stats.requests} requests ({summary['req_per_s']}/s), "
          f"errors {stats.errors or 0}")
    print(f"tokens: generated {stats.tokens} ({summary['gen_tok_per_s']} tok/s), "
          f"prompt {stats.prompt_tokens} ({summary['prompt_tok_per_s']} tok/s)")
    if cpu:
        print(f"cpu:    server used {cpu:.1f} CPU-s: {summary['gen_tok_per_cpu_s']} generated "
              f"tokens per CPU-second")
    if steps:
        print(f"batches: {steps:.0f} decode steps, "
              f"{(stats.tokens + stats.prompt_tokens) / steps:.1f} tokens per step on average")
    for name, key in (("ttft", "ttft_ms"), ("latency", "latency_ms"), ("per token", "per_token_ms")):
        v = summary[key]
        print(f"{name + ':':10s} p50 {v[50]} ms | p90 {v[90]} ms | p99 {v[99]} ms")


if __name__ == "__main__":
    main()
