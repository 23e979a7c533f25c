"""Speculative decoding side by side: `mnemo serve` and llama.cpp's `llama-server` on the same
model files, machine and requests, each plain and with its speculation settings, on two
workloads:

  code  a code-editing request: a 200-line source file of this repository (scripts/load.py's
        first 200 lines) and "rewrite it with one change" (a renamed function), greedy. Most of
        the answer is in the prompt: drafts hold.
  chat  an open-ended request (a story), greedy: drafts mostly fail; speculation must not cost.

Each request runs twice on a fresh server, the second time with its prompt cached, and the
second run's generation speed (timings.predicted_per_second: generated tokens over the time from
the first to the last token) is reported. mnemo's speculative answers are also compared with its
plain answer: they must be byte-identical (greedy), and the table says so.

  .venv/bin/python scripts/spec_bench.py -m models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
      -md models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --threads 2 --n-predict 256

llama-server runs through scripts/peer (scripts/peer-setup). Its speculative flags are those of
the peer's build (--spec-type ngram-simple / draft-simple, --spec-draft-n-max, -md).
"""
import argparse
import platform
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import start_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def code_prompt():
    lines = (ROOT / "scripts" / "load.py").read_text().splitlines()[:200]
    src = "\n".join(lines)
    return ("Here is a Python file:\n\n```python\n" + src + "\n```\n\n"
            "Rewrite the whole file with one change: rename the function `percentile` to "
            "`quantile` (and every call of it). Output only the new file in a code block.")


CHAT = ("Write a long, imaginative story about a lighthouse keeper who finds a map inside a "
        "bottle. Give the characters names and describe the sea.")


def ask(url, text, n_predict):
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": n_predict,
            "temperature": 0, "cache_prompt": True}
    r = requests.post(url + "/v1/chat/completions", json=body, timeout=3600)
    r.raise_for_status()
    d = r.json()
    return d["choices"][0]["message"]["content"], d.get("timings", {})


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--workloads", default="code,chat")
    ap.add_argument("--engines", default="mnemo,llama")
    ap.add_argument("--configs", default="plain,ngram,draft,ngram+draft",
                    help="which speculation settings to run (default: all)")
    ap.add_argument("--mnemo-args", default="",
                    help="more flags for mnemo's speculative runs, e.g. '--draft-vocab 8192'")
    args = ap.parse_args()
    m, md = args.model, args.model_draft
    common = f"-m {m} -c {args.ctx} -t {args.threads} --port {{port}} --host 127.0.0.1"
    mnemo = f"{ROOT}/build/mnemo serve {common} -np 1"
    llama = f"{ROOT}/scripts/peer llama-server {common} -np 1 --jinja -fa on"
    n = args.draft_max
    spec = f"--draft-max {n} {args.mnemo_args}".strip()
    configs = []
    if "mnemo" in args.engines:
        configs += [("mnemo", "plain", mnemo),
                    ("mnemo", "ngram", f"{mnemo} --spec-type ngram-simple {spec}")]
        if md:
            configs += [("mnemo", "draft", f"{mnemo} -md {md} {spec}"),
                        ("mnemo", "ngram+draft",
                         f"{mnemo} -md {md} --spec-type ngram-simple {spec}")]
    if "llama" in args.engines:
        configs += [("llama.cpp", "plain", llama),
                    ("llama.cpp", "ngram",
                     f"{llama} --spec-type ngram-simple --spec-draft-n-max {n}")]
        if md:
            configs += [("llama.cpp", "draft",
                         f"{llama} -md {md} --spec-type draft-simple --spec-draft-n-max {n}")]
    wanted_configs = set(args.configs.split(","))
    configs = [c for c in configs if c[1] in wanted_configs]
    workloads = {"code": code_prompt(), "chat": CHAT}
    wanted = [w for w in args.workloads.split(",") if w]
    results = {}  # (engine, config, workload) -> (tokens/s, draft_n, accepted, text)
    for engine, name, cmd in configs:
        proc, url = start_command(cmd)
        try:
            for w in wanted:
                ask(url, workloads[w], args.n_predict)  # reads the prompt
                t0 = time.time()
                text, t = ask(url, workloads[w], args.n_predict)
                results[(engine, name, w)] = (t.get("predicted_per_second", 0.0),
                                              t.get("draft_n", 0), t.get("draft_n_accepted", 0),
                                              text, t.get("predicted_n", 0))
                print(f"{engine:9} {name:12} {w:5} {results[(engine, name, w)][0]:7.2f} t/s "
                      f"({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    print(f"\nCPU: {cpu_name()}, {args.threads} threads; target {Path(m).name}"
          + (f", draft {Path(md).name}" if md else "") + f"; {args.n_predict} tokens, greedy, "
          f"{spec}\n")
    print("| workload | engine | speculation | tokens/s | vs plain | drafted | accepted | "
          "same text as plain |")
    print("|---|---|---|---|---|---|---|---|")
    for w in wanted:
        for engine, name, _ in configs:
            tps, dn, da, text, pn = results[(engine, name, w)]
            base = results.get((engine, "plain", w))
            ratio = tps / base[0] if base and base[0] > 0 else 0
            same = "-" if not base else "yes" if text == base[3] else "no"
            acc = f"{da} ({100 * da / dn:.0f} %)" if dn else "0"
            print(f"| {w} | {engine} | {name} | {tps:.2f} | {ratio:.2f}x | {dn} | {acc} | "
                  f"{same} |")
        best = {e: max((results[(e2, c, w)][0] for e2, c, _ in configs if e2 == e), default=0)
                for e in ("mnemo", "llama.cpp")}
        if best["mnemo"] and best["llama.cpp"]:
            print(f"\n{w}: mnemo's best / llama-server's best = "
                  f"{best['mnemo'] / best['llama.cpp']:.2f}x\n")


if __name__ == "__main__":
    main()
