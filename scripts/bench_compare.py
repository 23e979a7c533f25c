"""Side-by-side throughput of `mnemo bench` and llama.cpp's `llama-bench` on the same file.

Runs the two programs alternately (mnemo, llama.cpp, mnemo, llama.cpp, ...) for each
configuration so slow drifts of a shared machine hit both alike, takes the median of each
program's per-round means, and prints a markdown table of tokens/s and the ratio
mnemo / llama.cpp. Both programs emit llama-bench's JSON fields (n_prompt, n_gen, n_depth,
avg_ts, ...), which is all this script reads.

  .venv/bin/python scripts/bench_compare.py -m models/SmolLM2-135M-Instruct-Q4_1.gguf \
      --threads 1,2 --depths 0,2048 --kv f16,q8_0 --rounds 3

llama.cpp runs through scripts/peer (a Debian sid chroot, scripts/peer-setup), with flash
attention on (its CPU default, needed for a q8_0 V cache).

`--isa avx2` runs both engines' AVX2 code on a machine that has more (AVX-512): mnemo with
MNEMO_SIMD=AVX2, llama.cpp with only its `haswell` CPU backend (PEER_GGML_CPU, scripts/peer).
The memory system is still this machine's, so it stands in for an AVX2-only CPU's code paths,
not for its bandwidth.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --isa NAME -> (MNEMO_SIMD for mnemo, PEER_GGML_CPU for llama.cpp); "native" caps neither.
ISAS = {"native": (None, None), "avx2": ("AVX2", "haswell"), "sse4": ("SSE4", "sse42")}


def run_json(cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-2000:]}")
    text = res.stdout
    return json.loads(text[text.index("["):])


def bench(program, model, threads, depth, kv, n_prompt, n_gen, reps, extra, isa):
    common = ["-m", str(model), "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
              "-d", str(depth), "-ctk", kv, "-ctv", kv, "-r", str(reps), "-o", "json"]
    mnemo_simd, ggml_cpu = ISAS[isa]
    if program == "mnemo":
        cmd = [str(ROOT / "build" / "mnemo"), "bench"] + common
        env = {"MNEMO_SIMD": mnemo_simd} if mnemo_simd else {}
    else:
        cmd = [str(ROOT / "scripts" / "peer"), "llama-bench", "-fa", "1"] + common + extra
        env = {"PEER_GGML_CPU": ggml_cpu} if ggml_cpu else {}
    return {("pp" if r["n_prompt"] > 0 else "tg"): r["avg_ts"] for r in run_json(cmd, env)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--depths", default="0")
    ap.add_argument("--kv", default="f16")
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=2, help="repetitions inside each run")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per program")
    ap.add_argument("--llama-extra", default="", help="extra llama-bench flags, e.g. '--repack 0'")
    ap.add_argument("--isa", choices=sorted(ISAS), default="native",
                    help="cap both engines to this instruction set (see above)")
    args = ap.parse_args()
    extra = args.llama_extra.split()

    rows = []
    for threads in args.threads.split(","):
        for depth in args.depths.split(","):
            for kv in args.kv.split(","):
                samples = {"mnemo": {"pp": [], "tg": []}, "llama.cpp": {"pp": [], "tg": []}}
                for _ in range(args.rounds):
                    for prog in ("mnemo", "llama.cpp"):
                        r = bench(prog, args.model, threads, depth, kv, args.n_prompt,
                                  args.n_gen, args.reps, extra, args.isa)
                        for k, v in r.items():
                            samples[prog][k].append(v)
                for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
                    if n == 0:  # that test was not asked for
                        continue
                    ours = statistics.median(samples["mnemo"][test])
                    peer = statistics.median(samples["llama.cpp"][test])
                    name = f"{test}{n}" + (f" @ d{depth}" if int(depth) > 0 else "")
                    rows.append((threads, kv, name, ours, peer, ours / peer))
                    print(f"  t={threads} {kv} {name}: mnemo {ours:.1f}  llama.cpp {peer:.1f}  "
                          f"ratio {ours / peer:.2f}", file=sys.stderr, flush=True)

    print(f"model: {Path(args.model).name}; isa {args.isa}; "
          f"rounds {args.rounds} x {args.reps} reps, medians\n")
    print("| threads | K/V | test | mnemo t/s | llama.cpp t/s | ratio |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    for threads, kv, name, ours, peer, ratio in rows:
        print(f"| {threads} | {kv} | {name} | {ours:.1f} | {peer:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
