"""mnemo's Jinja engine (`mnemo template`) against Python's jinja2, byte for byte.

The reference is jinja2 configured as Hugging Face transformers renders chat templates
(helpers/chat_templates.py, which also holds the harness shared with the real templates' tests). Templates are tests/fixtures/chat_templates/*.jinja, written for
these tests: a few in the shape of a model family's format, and "torture" templates for the
rest of the language. (Real models' own templates are checked by test_chat_template_real.py,
from files fetched at test time.) Conversations are the named cases of
conversations.json; the harness adds bos_token "<s>" and eos_token "</s>" unless a case sets them,
and passes the same full context to both sides. strftime_now reads a fixed clock (NOW) on both.

A template's first comment may hold directives, each a list of case-name patterns (fnmatch);
a directive runs to the end of the comment or to the next directive:
    cases:  the cases it is rendered over (default: all)
    skip:   cases it is not meant for
    errors: the cases where jinja2 raises (checked by test_reference_errors_as_declared)
    random: no    keeps it out of the random-conversation test
A case with a "templates" list is only rendered by those templates.

Wherever jinja2 raises, mnemo must fail too (exit status 1, or {"ok": false} in batch mode), and
a raise_exception message must appear in mnemo's error. Each template is one `mnemo template`
run: --context names a JSON file holding the list of contexts and mnemo prints a JSON array of
{"ok": true, "text": ...} / {"ok": false, "error": ...}. The single-context mode (the rendered
text on stdout, exit 1 and the message on stderr on an error) is checked on a few pairs.

Also checked: the chat templates carried by the real GGUF models (`--model`, with the model's
bos/eos token texts; SmolLM2 only: Gemma 3 270M, a base model, carries none), and 200 seeded
random conversations through every template.
"""
import fnmatch
import functools
import json
import re
import subprocess
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from helpers.chat_templates import (  # noqa: E402
    CASES, CASES_BY_NAME, CHAT_TEMPLATE_FIXTURES as FIXTURES, NOW_UNIX, RANDOM_SEED, check_all,
    compare, describe_difference, full_context, gguf_template, random_contexts, reference,
    run_batch)
from helpers.paths import SMOLLM2  # noqa: E402

MODELS = [SMOLLM2]  # the real models that carry a chat template (Gemma 3 270M carries none)


# --- fixtures on disk ---------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*(cases|skip|errors|random):(.*)$")


class Template:
    def __init__(self, path: Path):
        self.name = path.stem
        self.path = path
        # Bytes decoded as they are: CRLF line ends must reach jinja2 (and mnemo) unchanged.
        self.text = path.read_bytes().decode("utf-8")
        self.directives = {"cases": ["*"], "skip": [], "errors": [], "random": ["yes"]}
        header = re.match(r"\{#(.*?)#\}", self.text, re.S)
        current = None
        for line in header.group(1).splitlines() if header else []:
            d = _DIRECTIVE.match(line)
            if d:
                current = d.group(1)
                self.directives[current] = d.group(2).replace(",", " ").split()
            elif current and line.strip():
                self.directives[current] += line.replace(",", " ").split()

    def applies_to(self, case) -> bool:
        if "templates" in case and self.name not in case["templates"]:
            return False
        name = case["name"]
        return (any(fnmatch.fnmatchcase(name, p) for p in self.directives["cases"])
                and not any(fnmatch.fnmatchcase(name, p) for p in self.directives["skip"]))

    def declares_error(self, case_name) -> bool:
        return any(fnmatch.fnmatchcase(case_name, p) for p in self.directives["errors"])

    @property
    def random(self) -> bool:
        return self.directives["random"] != ["no"]


TEMPLATES = [Template(p) for p in sorted(FIXTURES.glob("*.jinja"))]
PAIRS = [(t, c) for t in TEMPLATES for c in CASES if t.applies_to(c)]


# --- running mnemo (template_cli: conftest.py) ---------------------------------------------------

@functools.lru_cache(maxsize=None)
def _template_batch(binary: str, template_name: str, workdir: str):
    tpl = next(t for t in TEMPLATES if t.name == template_name)
    names = [c["name"] for c in CASES if tpl.applies_to(c)]
    contexts = [full_context(CASES_BY_NAME[n]["context"]) for n in names]
    results = run_batch(binary, ["--file", str(tpl.path)], contexts, Path(workdir), tpl.name)
    return dict(zip(names, results))


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("template_batches"))


# --- the fixtures agree with jinja2 (no mnemo needed) -------------------------------------------

def test_case_names_are_unique():
    assert len(CASES_BY_NAME) == len(CASES)
    assert TEMPLATES, f"no templates in {FIXTURES}"


@pytest.mark.parametrize("tpl", TEMPLATES, ids=lambda t: t.name)
def test_reference_errors_as_declared(tpl):
    """jinja2 raises exactly for the cases the template's `errors:` directive names, so a
    harness or fixture change cannot silently turn an expected rendering into an error."""
    cases = [c for c in CASES if tpl.applies_to(c)]
    assert cases, f"{tpl.name} applies to no case"
    for pattern in tpl.directives["errors"]:
        assert any(fnmatch.fnmatchcase(c["name"], pattern) for c in cases), \
            f"{tpl.name}: errors pattern {pattern!r} matches none of its cases"
    problems = []
    for c in cases:
        ref = reference(tpl.text, full_context(c["context"]))
        if ref["ok"] == tpl.declares_error(c["name"]):
            problems.append(f"{c['name']}: " + (
                "declared as an error but jinja2 rendered it" if ref["ok"]
                else f"jinja2 raised {ref['error']}"))
    assert not problems, f"{tpl.name}:\n" + "\n".join(problems)


# --- mnemo against jinja2 -----------------------------------------------------------------------

@pytest.mark.parametrize("tpl,case", PAIRS, ids=[f"{t.name}-{c['name']}" for t, c in PAIRS])
def test_template_matches_jinja2(template_cli, batch_dir, tpl, case):
    ours = _template_batch(str(template_cli), tpl.name, batch_dir)[case["name"]]
    ref = reference(tpl.text, full_context(case["context"]))
    problem = compare(ref, ours, f"{tpl.name} over {case['name']}")
    if problem:
        pytest.fail(problem)


SINGLE = [("mistral_small3_like", "single_user"), ("phi3_like", "unicode_quotes"),
          ("torture_whitespace", "whitespace_content"), ("torture_crlf", "multi_turn"),
          ("gemma3_like", "bad_alternation"), ("torture_errors", "err_zero_div"),
          ("error_unclosed_block", "single_user")]


@pytest.mark.parametrize("template_name,case_name", SINGLE)
def test_single_context_mode(template_cli, tmp_path, template_name, case_name):
    """One context object: the text alone on stdout (no newline added) and exit 0, or exit 1
    with the message on stderr."""
    tpl = next(t for t in TEMPLATES if t.name == template_name)
    context = full_context(CASES_BY_NAME[case_name]["context"])
    ctx_file = tmp_path / "context.json"
    ctx_file.write_text(json.dumps(context, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([str(template_cli), "template", "--file", str(tpl.path), "--context",
                           str(ctx_file), "--time", str(NOW_UNIX)], capture_output=True, timeout=60)
    ref = reference(tpl.text, context)
    stderr = proc.stderr.decode("utf-8", errors="replace")
    if ref["ok"]:
        assert proc.returncode == 0, f"exit {proc.returncode}: {stderr}"
        expected = ref["text"].encode("utf-8")
        if proc.stdout != expected:
            pytest.fail(describe_difference(ref["text"], proc.stdout.decode("utf-8", "replace")))
    else:
        assert proc.returncode == 1, \
            f"jinja2 raised {ref['error']!r}; mnemo exited {proc.returncode}: {proc.stdout[:300]!r}"
        assert stderr.strip(), "no message on stderr"
        if type(ref["exception"]) is jinja2.exceptions.TemplateError:
            assert str(ref["exception"]) in stderr


# --- the real models' templates -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def gguf_chat_info(path: str):
    """(chat template, bos token text, eos token text) of a GGUF file, read with gguf-py; None
    when the file carries no template (checked first with a quick metadata scan: gguf-py takes
    seconds on a 262k-token vocabulary)."""
    if gguf_template(path) is None:
        return None
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(path)
    template = reader.fields["tokenizer.chat_template"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def token_text(key):
        field = reader.fields.get(key)
        return "" if field is None else tokens.contents(int(field.contents()))

    return template, token_text("tokenizer.ggml.bos_token_id"), token_text("tokenizer.ggml.eos_token_id")


def model_contexts(case_contexts, bos, eos):
    """(what mnemo gets, what jinja2 gets): mnemo supplies the model's bos/eos texts itself, so
    any the case sets are dropped from both sides."""
    ours, theirs = [], []
    for ctx in case_contexts:
        base = {k: v for k, v in ctx.items() if k not in ("bos_token", "eos_token")}
        ours.append(base)
        theirs.append({**base, "bos_token": bos, "eos_token": eos})
    return ours, theirs


def _model_info(models_dir, name):
    path = models_dir / name
    if not path.exists():
        pytest.skip(f"{name} absent (run scripts/fetch-model)")
    info = gguf_chat_info(str(path))
    assert info is not None, f"{name} carries no tokenizer.chat_template"
    return path, info


@pytest.mark.parametrize("model", MODELS)
def test_model_template_matches_jinja2(template_cli, models_dir, tmp_path, model):
    path, (template, bos, eos) = _model_info(models_dir, model)
    usable = [c for c in CASES if "templates" not in c]
    ours, theirs = model_contexts([c["context"] for c in usable], bos, eos)
    results = run_batch(template_cli, ["--model", str(path)], ours, tmp_path, "model")
    refs = [reference(template, ctx) for ctx in theirs]
    check_all(results, refs, [f"{model} over {c['name']}" for c in usable])


# --- random conversations -----------------------------------------------------------------------

RANDOM_TEMPLATES = [t for t in TEMPLATES if t.random]


@pytest.mark.parametrize("tpl", RANDOM_TEMPLATES, ids=lambda t: t.name)
def test_random_conversations(template_cli, tmp_path, tpl):
    contexts = random_contexts()
    results = run_batch(template_cli, ["--file", str(tpl.path)], contexts, tmp_path, tpl.name)
    refs = [reference(tpl.text, ctx) for ctx in contexts]
    check_all(results, refs, [f"{tpl.name} over random conversation {i} (seed {RANDOM_SEED})"
                               for i in range(len(contexts))])


@pytest.mark.parametrize("model", MODELS)
def test_random_conversations_model_template(template_cli, models_dir, tmp_path, model):
    path, (template, bos, eos) = _model_info(models_dir, model)
    ours, theirs = model_contexts(random_contexts(), bos, eos)
    results = run_batch(template_cli, ["--model", str(path)], ours, tmp_path, "model")
    refs = [reference(template, ctx) for ctx in theirs]
    check_all(results, refs, [f"{model} over random conversation {i} (seed {RANDOM_SEED})"
                               for i in range(len(ours))])
