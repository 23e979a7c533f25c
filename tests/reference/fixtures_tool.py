#!/usr/bin/env python3
"""Helpers for tests/reference/make_fixtures.sh (run inside the peer chroot, standard library only).

  fixtures_tool.py tsv SECTION CASES.json OUT.tsv
      Writes one section of cases.json ("tokenize", "logits", "generate") in the hex TSV form
      that llama_ref reads.
  fixtures_tool.py crosscheck MODEL TOKENIZE_FIXTURE.json
      Re-tokenizes every case with the llama-tokenize tool for each flag set (exact bytes through
      --stdin) and fails if any id list differs from the fixture (made with the C API).
  fixtures_tool.py variants LOGITS_FIXTURE.json NAME=RUN.json[:DESCRIPTION] ...
      Adds to each prompt of the logits fixture a "variants" object: for each other llama.cpp run
      of the same prompts (another CPU backend build, repacked weights, f32 weights), its top1 and
      next_logprob arrays and how far they are from the fixture's own (a measure of how much
      llama.cpp disagrees with itself, to set test tolerances by).
  fixtures_tool.py check FIXTURE.json MIN_TOKENS MAX_TOKENS
      Checks that the file is valid JSON and each prompt's token count lies in [MIN, MAX].
"""
import json
import subprocess
import sys


def die(msg):
    print(f"fixtures_tool: error: {msg}", file=sys.stderr)
    sys.exit(1)


def cmd_tsv(section, cases_path, out_path):
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)[section]
    with open(out_path, "w", encoding="ascii") as out:
        for case in cases:
            name = case["name"]
            if "messages" in case:
                fields = [name, "chat"]
                for msg in case["messages"]:
                    fields += [msg["role"], msg["content"].encode("utf-8").hex()]
            else:
                fields = [name, "text", case["text"].encode("utf-8").hex()]
            out.write("\t".join(fields) + "\n")
    print(f"fixtures_tool: {len(cases)} {section} cases -> {out_path}")


def cmd_crosscheck(model, fixture_path):
    with open(fixture_path, encoding="utf-8") as f:
        fixture = json.load(f)
    flag_sets = fixture["flag_sets"]
    n = 0
    for case in fixture["cases"]:
        text = bytes.fromhex(case["text_hex"])
        for fs in flag_sets:
            argv = ["llama-tokenize", "-m", model, "--stdin", "--ids", "--log-disable"]
            argv += fs["llama_tokenize_flags"]
            proc = subprocess.run(argv, input=text, capture_output=True)
            if proc.returncode != 0:
                die(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')[-400:]}")
            lines = [l for l in proc.stdout.decode().splitlines() if l.startswith("[")]
            if len(lines) != 1:
                die(f"unexpected llama-tokenize output: {proc.stdout!r}")
            ids = json.loads(lines[0])
            want = case["results"][fs["name"]]["ids"]
            if ids != want:
                die(f"case {case['name']} flags {fs['name']}: llama-tokenize {ids} != C API {want}")
            n += 1
    print(f"fixtures_tool: llama-tokenize agrees with the C API on {n} (case, flags) pairs")


def cmd_variants(fixture_path, specs):
    with open(fixture_path, encoding="utf-8") as f:
        fixture = json.load(f)
    for spec in specs:
        name, _, rest = spec.partition("=")
        run_path, _, desc = rest.partition(":")
        with open(run_path, encoding="utf-8") as f:
            run = json.load(f)
        by_name = {p["name"]: p for p in run["prompts"]}
        for p in fixture["prompts"]:
            q = by_name[p["name"]]
            if q["tokens"] != p["tokens"]:
                die(f"variant {name}: prompt {p['name']} tokenized differently")
            diffs = [abs(a - b) for a, b in zip(p["next_logprob"], q["next_logprob"])]
            agree = sum(a == b for a, b in zip(p["top1"], q["top1"]))
            p.setdefault("variants", {})[name] = {
                "desc": desc,
                "cpu_backend_log": run["settings"]["llama_log"].splitlines()[0],
                "use_extra_bufts": run["settings"]["use_extra_bufts"],
                "max_abs_next_logprob_diff": round(max(diffs), 6),
                "mean_abs_next_logprob_diff": round(sum(diffs) / len(diffs), 6),
                "top1_agree": agree,
                "top1": q["top1"],
                "next_logprob": q["next_logprob"],
            }
            print(f"fixtures_tool: {p['name']} vs {name}: max |d logprob| {max(diffs):.4f}, "
                  f"mean {sum(diffs) / len(diffs):.4f}, top1 agree {agree}/{len(p['top1'])}")
    text = json.dumps(fixture, ensure_ascii=False, indent=1)
    # Keep the numeric arrays on one line each: compact and still diffable.
    text = _squash_arrays(text)
    with open(fixture_path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def _squash_arrays(text):
    import re
    pattern = re.compile(r"\[\s*(-?[0-9][-0-9.eE+]*|null)(\s*,\s*(-?[0-9][-0-9.eE+]*|null))*\s*\]")
    return pattern.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(0)[1:-1].split(",")) + "]", text)


def cmd_check(fixture_path, lo, hi):
    with open(fixture_path, encoding="utf-8") as f:
        fixture = json.load(f)
    for p in fixture["prompts"]:
        if not lo <= p["n_tokens"] <= hi:
            die(f"{fixture_path}: prompt {p['name']} has {p['n_tokens']} tokens, want {lo}..{hi}")
        print(f"fixtures_tool: {fixture_path}: prompt {p['name']}: {p['n_tokens']} tokens")


def main():
    if len(sys.argv) < 2:
        die(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "tsv" and len(args) == 3:
        cmd_tsv(*args)
    elif cmd == "crosscheck" and len(args) == 2:
        cmd_crosscheck(*args)
    elif cmd == "variants" and len(args) >= 2:
        cmd_variants(args[0], args[1:])
    elif cmd == "check" and len(args) == 3:
        cmd_check(args[0], int(args[1]), int(args[2]))
    else:
        die(__doc__)


if __name__ == "__main__":
    main()
