"""mnemo's tokenizer against llama.cpp's own tokenizer references: its vocabulary-only GGUFs.

scripts/fetch-model (the `templates` target) extracts from llama-cpp-python's source package
what its vendored llama.cpp keeps in models/: ggml-vocab-NAME.gguf (the tokenizer.* keys of a
model family, no tensors) and, for most, ggml-vocab-NAME.gguf.inp / .gguf.out, the texts and the
ids llama.cpp's tests/test-tokenizer-0 expects for them. The format, as that test reads it:
- .inp: the texts, separated by the line "__ggml_vocab_test__" (a text is everything between
  one "\\n__ggml_vocab_test__\\n" and the next; a separator at the very end closes the last text
  and starts none);
- .out: one line per text, the expected ids separated by spaces (an empty line: no ids);
- tokenized with add_special = false and parse_special = false.

Every vocabulary falls in one class of VOCABS below, and the test asserts the class:
- "exact": mnemo supports its tokenizer model and pre-tokenizer; every text of its .inp must
  give exactly the ids of its .out (and detokenize back to the text);
- "no_reference": supported, but llama.cpp ships no expected ids: it must load (a vocabulary
  without tokenizer.ggml.pre loads with the "default" pre-tokenizer and a warning, as in
  llama.cpp) and round-trip the texts of the other vocabularies;
- "refused": a tokenizer model or pre-tokenizer mnemo does not implement (today the WordPiece
  and Unigram models, "bert" and "t5"): loading must fail cleanly (exit code 1, not a crash)
  with a NotSupported error that names it, and no tokens. An unknown pre-tokenizer is checked
  the same way on a copy of a real vocabulary with its tokenizer.ggml.pre edited.
A vocabulary file that is not in VOCABS fails the test (classify it), as does a missing
models/vocab/ when models/ exists (run scripts/fetch-model templates); only a checkout without
models/ at all skips, like the other real-model tests.
"""
import json
import subprocess

import pytest

from helpers.paths import REPO_ROOT, tool

MODELS_DIR = REPO_ROOT / "models"
VOCAB_DIR = MODELS_DIR / "vocab"
SEPARATOR = b"\n__ggml_vocab_test__\n"

# name (ggml-vocab-NAME.gguf) -> class and what mnemo reports: for "exact" / "no_reference" the
# tokenizer type and pre-tokenizer of `tokenize_tool --info`, for "refused" the text the error
# must name.
VOCABS = {
    "command-r": ("exact", "bpe", "smollm"),
    "deepseek-coder": ("exact", "bpe", "deepseek-coder"),
    "deepseek-llm": ("exact", "bpe", "deepseek-llm"),
    "falcon": ("exact", "bpe", "falcon"),
    "gemma-4": ("exact", "bpe", "gemma4"),
    "gpt-2": ("exact", "bpe", "gpt2"),
    "llama-bpe": ("exact", "bpe", "llama3"),
    "llama-spm": ("exact", "spm", "none"),
    "mpt": ("exact", "bpe", "gpt2"),
    "phi-3": ("exact", "spm", "none"),
    "qwen2": ("exact", "bpe", "qwen2"),
    "qwen35": ("exact", "bpe", "qwen35"),
    "refact": ("exact", "bpe", "smollm"),
    "starcoder": ("exact", "bpe", "smollm"),
    "aquila": ("no_reference", "bpe", "default"),
    "baichuan": ("no_reference", "spm", "none"),
    "gpt-neox": ("no_reference", "bpe", "default"),
    "bert-bge": ("refused", "tokenizer.ggml.model = 'bert'"),  # WordPiece
    "nomic-bert-moe": ("refused", "tokenizer.ggml.model = 't5'"),  # Unigram
}


def _names(kind):
    return [n for n, spec in VOCABS.items() if spec[0] == kind]


@pytest.fixture(scope="module")
def vocab_dir():
    """models/vocab/, complete; skips only when there is no models/ at all."""
    if not MODELS_DIR.is_dir():
        pytest.skip(f"{MODELS_DIR} absent: run scripts/fetch-model")
    if not (VOCAB_DIR / ".complete").exists():
        pytest.fail(f"{VOCAB_DIR} is missing or incomplete: run scripts/fetch-model templates")
    return VOCAB_DIR


@pytest.fixture(scope="module")
def tokenize_tool(build_dir):
    return tool(build_dir, "tokenize_tool")


def _gguf(vocab_dir, name):
    return vocab_dir / f"ggml-vocab-{name}.gguf"


def read_cases(gguf):
    """[(text bytes, expected ids)] of gguf's .inp / .out (format: the module docstring)."""
    raw = gguf.with_name(gguf.name + ".inp").read_bytes()
    texts = raw.split(SEPARATOR)
    if raw.endswith(SEPARATOR) or not raw:
        texts.pop()
    lines = gguf.with_name(gguf.name + ".out").read_text(encoding="ascii").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(texts) == len(lines), f"{gguf.name}: {len(texts)} texts but {len(lines)} id lines"
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def _run(tokenize_tool, gguf, *args, stdin=b""):
    return subprocess.run([str(tokenize_tool), str(gguf), *args], input=stdin,
                          capture_output=True, timeout=300)


def _info(tokenize_tool, gguf):
    proc = _run(tokenize_tool, gguf, "--info")
    assert proc.returncode == 0, f"{gguf.name} does not load: {proc.stderr.decode(errors='replace')}"
    return json.loads(proc.stdout), proc.stderr.decode(errors="replace")


def _tokenize(tokenize_tool, gguf, texts):
    """tokenize_tool --batch over texts (add_special = parse_special = false), one result each."""
    jobs = [{"text_hex": t.hex(), "add_special": False, "parse_special": False} for t in texts]
    proc = _run(tokenize_tool, gguf, "--batch", stdin=json.dumps(jobs).encode())
    assert proc.returncode == 0, f"{gguf.name}: {proc.stderr.decode(errors='replace')}"
    results = json.loads(proc.stdout)
    assert len(results) == len(texts)
    return results


def test_every_vocabulary_is_classified(vocab_dir):
    found = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in vocab_dir.glob("*.gguf"))
    assert found == sorted(VOCABS), "classify every vocabulary of models/vocab/ in VOCABS"
    for name in VOCABS:
        has_ref = _gguf(vocab_dir, name).with_name(f"ggml-vocab-{name}.gguf.inp").exists()
        if VOCABS[name][0] == "exact":
            assert has_ref, f"{name}: no .inp / .out to compare with"
        if VOCABS[name][0] == "no_reference":
            assert not has_ref, f"{name} has expected ids now: make it 'exact'"


@pytest.mark.parametrize("name", _names("exact"))
def test_tokens_equal_llama_cpp(tokenize_tool, vocab_dir, name):
    gguf = _gguf(vocab_dir, name)
    info, _ = _info(tokenize_tool, gguf)
    assert (info["type"], info["pre"]) == VOCABS[name][1:]
    cases = read_cases(gguf)
    assert len(cases) >= 40
    results = _tokenize(tokenize_tool, gguf, [t for t, _ in cases])
    wrong = [f"  {t!r}\n    want {want}\n    got  {r['ids']}"
             for (t, want), r in zip(cases, results) if r["ids"] != want]
    assert not wrong, f"{name}: {len(wrong)} of {len(cases)} texts differ from llama.cpp:\n" + \
        "\n".join(wrong)
    # Every text is valid UTF-8: the ids give it back (special tokens rendered, no clean-up).
    lost = [t for (t, _), r in zip(cases, results) if bytes.fromhex(r["roundtrip_hex"]) != t]
    assert not lost, f"{name}: detokenize(tokenize(s)) != s for {lost}"


@pytest.mark.parametrize("name", _names("no_reference"))
def test_vocabulary_without_reference_loads(tokenize_tool, vocab_dir, name):
    gguf = _gguf(vocab_dir, name)
    info, stderr = _info(tokenize_tool, gguf)
    assert (info["type"], info["pre"]) == VOCABS[name][1:]
    if info["pre"] == "default":  # no tokenizer.ggml.pre in the file: said, not silent
        assert "no tokenizer.ggml.pre" in stderr, stderr
    texts = [t for t, _ in read_cases(_gguf(vocab_dir, "gpt-2"))]
    results = _tokenize(tokenize_tool, gguf, texts)
    lost = [t for t, r in zip(texts, results) if bytes.fromhex(r["roundtrip_hex"]) != t]
    assert not lost, f"{name}: detokenize(tokenize(s)) != s for {lost}"


@pytest.mark.parametrize("name", _names("refused"))
def test_unsupported_vocabulary_is_refused(tokenize_tool, vocab_dir, name):
    gguf = _gguf(vocab_dir, name)
    for args, stdin in ((["--info"], b""), (["--add-special", "0", "--parse-special", "0"],
                                            b"Hello world")):
        proc = _run(tokenize_tool, gguf, *args, stdin=stdin)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 1, f"{name} {args}: exit {proc.returncode} (want 1)\n{err}"
        assert proc.stdout == b"", f"{name}: output despite the error: {proc.stdout[:200]!r}"
        assert "NotSupported" in err and VOCABS[name][1] in err, err


def test_unknown_pre_tokenizer_is_refused(tokenize_tool, vocab_dir, tmp_path):
    """A real vocabulary whose tokenizer.ggml.pre names no pre-tokenizer mnemo has ("qwen99":
    the qwen35 file with its value edited) is refused, not tokenized with some other one."""
    def pre_kv(value):
        return (b"tokenizer.ggml.pre" + (8).to_bytes(4, "little") +
                len(value).to_bytes(8, "little") + value)
    data = _gguf(vocab_dir, "qwen35").read_bytes()
    assert data.count(pre_kv(b"qwen35")) == 1
    edited = tmp_path / "ggml-vocab-qwen99.gguf"
    edited.write_bytes(data.replace(pre_kv(b"qwen35"), pre_kv(b"qwen99")))
    proc = _run(tokenize_tool, edited, "--add-special", "0", "--parse-special", "0",
                stdin=b"Hello world")
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1 and proc.stdout == b"", err
    assert "NotSupported" in err and "tokenizer.ggml.pre = 'qwen99'" in err, err
