"""Chat templates: the reference renderer (Python's jinja2 set up as Hugging Face transformers
renders `tokenizer.chat_template`), a GGUF file's template, and the harness that runs
`mnemo template` over the conversations of tests/fixtures/chat_templates/ and compares its
results with the reference (test_chat_template_jinja.py, test_chat_template_real.py,
test_chat_template_server.py).

The reference renderer (render_reference):

- jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
  jinja2.ext.loopcontrols extension ({% break %}, {% continue %}) and a `{% generation %}` ...
  `{% endgeneration %}` block tag that only renders its body (transformers uses it to mark the
  assistant's tokens; the text is unchanged);
- keep_trailing_newline left False (a template's final newline is dropped), autoescape off;
- the `tojson` filter replaced by tojson(x, ensure_ascii=False, indent=None, separators=None,
  sort_keys=False) -> json.dumps with those arguments (no HTML escaping; non-ASCII kept unless
  ensure_ascii);
- globals raise_exception(msg), which raises jinja2.exceptions.TemplateError(msg), and
  strftime_now(fmt), which formats `now` (the tests fix it instead of reading the clock).

render_reference raises whatever jinja2 raises (syntax errors, raise_exception, type errors).
"""
import functools
import json
import random
import struct
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pytest
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from helpers.paths import FIXTURES_DIR

# --- the reference renderer ---------------------------------------------------------------------


class GenerationBlock(Extension):
    """`{% generation %}body{% endgeneration %}` renders as `body`."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


@functools.lru_cache(maxsize=64)
def _compiled(template_text: str, now: datetime):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = now.strftime
    return env.from_string(template_text)


def render_reference(template_text: str, context: dict, now: datetime) -> str:
    """`template_text` rendered over `context` (messages, add_generation_prompt, bos_token, ...)
    with strftime_now reading `now`."""
    return _compiled(template_text, now).render(**context)


# --- a GGUF file's template ---------------------------------------------------------------------

# Sizes of the fixed-width GGUF metadata value types (GGUF spec "gguf_metadata_value_type").
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@functools.lru_cache(maxsize=None)
def gguf_template(path):
    """tokenizer.chat_template of a GGUF file, or None: a minimal metadata scan written here from
    the GGUF spec (independent of mnemo's reader, and much faster than gguf-py on a 262k vocab)."""
    with open(path, "rb") as f:
        magic, version, _n_tensors, n_kv = struct.unpack("<IIQQ", f.read(24))
        assert magic == 0x46554747 and version in (2, 3)

        def read_str():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def skip(vtype):
            if vtype == 8:
                (n,) = struct.unpack("<Q", f.read(8))
                f.seek(n, 1)
            elif vtype == 9:
                etype, count = struct.unpack("<IQ", f.read(12))
                if etype in _SCALAR:
                    f.seek(_SCALAR[etype] * count, 1)
                else:
                    for _ in range(count):
                        skip(etype)
            else:
                f.seek(_SCALAR[vtype], 1)

        for _ in range(n_kv):
            key = read_str().decode("utf-8")
            (vtype,) = struct.unpack("<I", f.read(4))
            if key == "tokenizer.chat_template" and vtype == 8:
                return read_str().decode("utf-8")
            skip(vtype)
    return None


# --- the conversations and the harness ----------------------------------------------------------

# Templates written for the tests, and the named conversations (conversations.json) they are
# rendered over.
CHAT_TEMPLATE_FIXTURES = FIXTURES_DIR / "chat_templates"
# strftime_now reads this fixed clock on both sides (mnemo: --time NOW_UNIX).
NOW = datetime(2026, 3, 5, 12, 0, tzinfo=timezone.utc)
NOW_UNIX = int(NOW.timestamp())  # 1772712000
# What the harness adds to a context that does not set them.
DEFAULT_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
RANDOM_SEED = 20260305
RANDOM_COUNT = 200

CASES = json.loads((CHAT_TEMPLATE_FIXTURES / "conversations.json").read_text(encoding="utf-8"))
CASES_BY_NAME = {c["name"]: c for c in CASES}


def full_context(case_context: dict) -> dict:
    """A case's context with bos_token "<s>" and eos_token "</s>" unless it sets them."""
    return {**DEFAULT_TOKENS, **case_context}


def reference(template_text: str, context: dict) -> dict:
    """jinja2's result in the shape of mnemo's batch output (plus the exception)."""
    try:
        return {"ok": True, "text": render_reference(template_text, context, NOW)}
    except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected failure
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "exception": e}


def run_batch(binary, source_args, contexts, workdir: Path, label: str) -> list:
    """`mnemo template SOURCE --context LIST.json` -> one result dict per context. A run that
    fails as a whole (a template that does not parse) counts as a failure for every context."""
    workdir.mkdir(parents=True, exist_ok=True)
    ctx_file = workdir / f"{label}.contexts.json"
    ctx_file.write_text(json.dumps(contexts, ensure_ascii=False), encoding="utf-8")
    cmd = [str(binary), "template", *source_args, "--context", str(ctx_file),
           "--time", str(NOW_UNIX)]
    proc = subprocess.run(cmd, capture_output=True, timeout=300)
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    try:
        results = json.loads(stdout)
    except ValueError:
        results = None
    if (isinstance(results, list) and len(results) == len(contexts)
            and all(isinstance(r, dict) and isinstance(r.get("ok"), bool) for r in results)):
        return results
    if proc.returncode != 0 and not stdout.strip():
        return [{"ok": False, "error": stderr.strip(), "whole_run": True} for _ in contexts]
    pytest.fail(f"`{' '.join(cmd)}` exited {proc.returncode} without a JSON array of "
                f"{len(contexts)} results\nstdout: {stdout[:2000]!r}\nstderr: {stderr[-2000:]}")


def describe_difference(expected: str, actual: str) -> str:
    """Where two texts first differ, with the surrounding characters of each as repr."""
    i = 0
    while i < min(len(expected), len(actual)) and expected[i] == actual[i]:
        i += 1
    lo = max(0, i - 60)
    return (f"first difference at character {i} (UTF-8 byte {len(expected[:i].encode())}); "
            f"jinja2 gave {len(expected)} characters, mnemo {len(actual)}\n"
            f"  jinja2: ...{expected[lo:i + 60]!r}\n"
            f"  mnemo:  ...{actual[lo:i + 60]!r}")


def compare(ref: dict, ours: dict, what: str):
    """None when mnemo agrees with jinja2, else a message saying how it does not."""
    if ref["ok"]:
        if not ours.get("ok"):
            return f"{what}: jinja2 rendered it, mnemo failed: {ours.get('error')!r}"
        if ours.get("text") != ref["text"]:
            return f"{what}: texts differ\n{describe_difference(ref['text'], ours.get('text') or '')}"
        return None
    if ours.get("ok"):
        return (f"{what}: jinja2 raised {ref['error']!r} but mnemo rendered "
                f"{(ours.get('text') or '')[:300]!r}")
    exc = ref["exception"]
    if type(exc) is jinja2.exceptions.TemplateError and str(exc) not in (ours.get("error") or ""):
        return (f"{what}: both failed, but mnemo's error {ours.get('error')!r} lacks the "
                f"raise_exception message {str(exc)!r}")
    return None


def check_all(results, refs, labels):
    """Fails the test with the first differences (compare) of mnemo's results from the
    references, labelled."""
    problems = [p for p in (compare(r, o, label) for r, o, label in zip(refs, results, labels)) if p]
    if problems:
        pytest.fail(f"{len(problems)} of {len(refs)} differ; the first ones:\n\n"
                    + "\n\n".join(problems[:8]))


# --- random conversations -----------------------------------------------------------------------

_PIECES = ["hello", "world", "é", "日本語", "🦙", "Zoë", "naïve", "x", "42", "3.14", "{{", "}}",
           "{%", "%}", "{#", "#}", "{{ messages }}", "</think>", "<think>", "<tool_response>",
           "</tool_response>", "<|im_end|>", "[INST]", '"', "'", "\\", "\\n", "a\tb", "line\nbreak",
           "/think", "/no_think", "", "  "]
_EDGES = ["", "", " ", "  ", "\t", "\n", "\n\n", " \n", "\r\n", "\u00a0", "\u3000"]


def random_content(rng: random.Random) -> str:
    """A message's content: empty (5%), or 1-8 pieces of text that trip templates (Unicode, Jinja
    and special-token look-alikes, escapes) between random leading and trailing whitespace."""
    if rng.random() < 0.05:
        return ""
    body = " ".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 8)))
    return rng.choice(_EDGES) + body + rng.choice(_EDGES)


def random_contexts(seed=RANDOM_SEED, count=RANDOM_COUNT):
    """Conversations in the usual order: an optional system turn, then user and assistant
    alternating from a user turn; ending on a user turn with a generation prompt, or on an
    assistant turn (continued) without."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        messages = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": random_content(rng)})
        add_generation_prompt = rng.random() < 0.6
        turns = rng.randint(1, 4) * 2 - (1 if add_generation_prompt else 0)
        for i in range(turns):
            if i % 2 == 0:
                messages.append({"role": "user", "content": random_content(rng)})
            else:
                m = {"role": "assistant", "content": random_content(rng)}
                if rng.random() < 0.25:
                    m["reasoning_content"] = random_content(rng)
                messages.append(m)
        ctx = {"messages": messages, "add_generation_prompt": add_generation_prompt}
        thinking = rng.choice([None, True, False])
        if thinking is not None:
            ctx["enable_thinking"] = thinking
        out.append(full_context(ctx))
    return out
