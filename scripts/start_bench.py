"""Start-up side by side: how long until the first token, mnemo against llama.cpp, same model
file and machine (page cache warm: each command runs once untimed first).

  1. One-shot: `mnemo run -n 1` against `llama-completion -n 1` on a short prompt, from process
     start to exit; mnemo without and with --repack-cache (the cache written by the untimed run).
  2. A server restart: `mnemo serve --cache-dir D --repack-cache R` has answered a long prompt
     (a 200-line source file) before it was stopped; it starts again and the same prompt comes:
     the time from process start to the answer's first token (its whole answer: n_predict 1).
     Against `llama-server`, which has no disk prompt cache, started the same way (a cold start).

  .venv/bin/python scripts/start_bench.py -m models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
"""
import argparse
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd):
    t0 = time.time()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    return time.time() - t0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_first_token(cmd_template, prompt):
    """Seconds from starting the server to the end of a 1-token answer to `prompt`."""
    port = free_port()
    cmd = shlex.split(cmd_template.replace("{port}", str(port)))
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.time() - t0 > 300:
                sys.exit("start_bench.py: the server did not start: " + " ".join(cmd))
            time.sleep(0.02)
        r = requests.post(url + "/completion", json={"prompt": prompt, "n_predict": 1,
                                                     "temperature": 0, "cache_prompt": True},
                          timeout=600)
        r.raise_for_status()
        took = time.time() - t0
        cached = r.json().get("timings", {}).get("cache_n", 0)
        return took, cached
    finally:
        proc.terminate()
        proc.wait(60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    m, t = args.model, args.threads
    work = Path(tempfile.mkdtemp(prefix="mnemo_start_"))
    repack = work / "repack"
    cache = work / "cache"
    try:
        one_shot = {
            "mnemo run": [str(ROOT / "build/mnemo"), "run", "-m", m, "-p", "Hello", "-n", "1",
                          "-t", str(t)],
            "mnemo run --repack-cache": [str(ROOT / "build/mnemo"), "run", "-m", m, "-p",
                                         "Hello", "-n", "1", "-t", str(t), "--repack-cache",
                                         str(repack)],
            "llama-completion": [str(ROOT / "scripts/peer"), "llama-completion", "-m", m, "-p",
                                 "Hello", "-n", "1", "-t", str(t), "-no-cnv"],
        }
        rows = []
        for name, cmd in one_shot.items():
            timed(cmd)  # warm the page cache (and write the repack cache)
            rows.append((name, statistics.median(timed(cmd) for _ in range(args.rounds))))
        src = "\n".join((ROOT / "scripts/load.py").read_text().splitlines()[:200])
        prompt = "Explain what this file does:\n\n" + src + "\n"
        mnemo = (f"{ROOT}/build/mnemo serve -m {m} -t {t} -c 8192 -np 1 --port {{port}} "
                 f"--cache-dir {cache} --repack-cache {repack}")
        llama = f"{ROOT}/scripts/peer llama-server -m {m} -t {t} -c 8192 -np 1 --port {{port}}"
        server_first_token(mnemo, prompt)  # the conversation before the restart
        restarts = [server_first_token(mnemo, prompt) for _ in range(args.rounds)]
        colds = [server_first_token(llama, prompt) for _ in range(args.rounds)]
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                    if ln.startswith("model name")), "?")
        print(f"\nCPU: {cpu}, {t} threads; {Path(m).name}; medians of {args.rounds}\n")
        print("| start to first token | seconds |")
        print("|---|---|")
        for name, s in rows:
            print(f"| {name} (short prompt, process start to exit) | {s:.2f} |")
        print(f"| mnemo serve restart, prompt of {len(src)} chars from the disk cache "
              f"(cache_n {restarts[0][1]}) | {statistics.median(r[0] for r in restarts):.2f} |")
        print(f"| llama-server cold start, same prompt | "
              f"{statistics.median(c[0] for c in colds):.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
