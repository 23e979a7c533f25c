"""mnemo's tokenizer against llama.cpp on the real models, string by string.

Fixtures tests/fixtures/tokenize_<model>.json (schema mnemo-tokenize-v1) hold llama.cpp's ids,
pieces and detokenized text for a set of tricky strings under four flag sets (add_special x
parse_special); tests/reference/make_fixtures.sh regenerates them. Our side runs through
tests/tools/tokenize_tool (one process per model, --batch). Also checked on the real vocabularies:
detokenize(tokenize(s)) == s, and tokenizing a long text is fast.
"""
import json
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct-Q4_1.gguf",
    "gemma3": "gemma-3-270m-Q4_K_M.gguf",
}


def _fixture(name):
    path = FIXTURES / f"tokenize_{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _case_params():
    params = []
    for name in MODELS:
        fx = _fixture(name)
        if fx is None:
            params.append(pytest.param(name, None, marks=pytest.mark.skip(
                reason=f"fixture tests/fixtures/tokenize_{name}.json absent "
                       "(run tests/reference/make_fixtures.sh)")))
            continue
        for case in fx["cases"]:
            params.append(pytest.param(name, case["name"], id=f"{name}-{case['name']}"))
    return params


def _tool(build_dir):
    exe = build_dir / "tests" / "tools" / "tokenize_tool"
    if not exe.exists():
        pytest.fail(f"{exe} not built (cmake --build {build_dir} --target tokenize_tool)")
    return exe


def _model_path(models_dir, name):
    path = models_dir / MODELS[name]
    if not path.exists():
        pytest.skip(f"model {path.name} absent (run scripts/fetch-model)")
    return path


def _text_bytes(case):
    return bytes.fromhex(case["text_hex"]) if "text_hex" in case else case["text"].encode()


_RESULTS = {}


def _results(build_dir, models_dir, name):
    """Runs every case x flag set of the fixture through tokenize_tool once per model."""
    if name in _RESULTS:
        return _RESULTS[name]
    fx = _fixture(name)
    model = _model_path(models_dir, name)
    jobs, keys = [], []
    for case in fx["cases"]:
        for fs in fx["flag_sets"]:
            jobs.append({"text_hex": _text_bytes(case).hex(),
                         "add_special": fs["add_special"],
                         "parse_special": fs["parse_special"]})
            keys.append((case["name"], fs["name"]))
    out = subprocess.run([str(_tool(build_dir)), str(model), "--batch"],
                         input=json.dumps(jobs).encode(), capture_output=True, check=True)
    res = dict(zip(keys, json.loads(out.stdout)))
    _RESULTS[name] = res
    return res


@pytest.mark.parametrize("name,case_name", _case_params())
def test_matches_llama_cpp(build_dir, models_dir, name, case_name):
    fx = _fixture(name)
    case = next(c for c in fx["cases"] if c["name"] == case_name)
    ours = _results(build_dir, models_dir, name)
    for fs in fx["flag_sets"]:
        want = case["results"][fs["name"]]
        got = ours[(case_name, fs["name"])]
        where = f"{name}/{case_name}/{fs['name']} text={_text_bytes(case)!r}"
        assert got["ids"] == want["ids"], where
        assert got["pieces_hex"] == want["pieces_hex"], where
        for key in ("detok", "detok_plain"):
            mine = bytes.fromhex(got[key + "_hex"])
            if key + "_hex" in want:
                assert mine == bytes.fromhex(want[key + "_hex"]), f"{where} {key}"
            else:
                assert mine.decode("utf-8", errors="replace") == want[key], f"{where} {key}"


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_real_vocab(build_dir, models_dir, name):
    fx = _fixture(name)
    if fx is None:
        pytest.skip(f"fixture tokenize_{name}.json absent")
    ours = _results(build_dir, models_dir, name)
    for case in fx["cases"]:
        text = _text_bytes(case)
        # Without BOS, specials rendered: the exact input comes back.
        for fs in ("no_bos", "raw"):
            got = bytes.fromhex(ours[(case["name"], fs)]["roundtrip_hex"])
            assert got == text, f"{name}/{case['name']}/{fs}"


@pytest.mark.parametrize("name", list(MODELS))
def test_long_text_is_fast(build_dir, models_dir, name):
    """~1 MB of mixed text (words, code, CJK, emoji, whitespace runs, digits) in a few seconds."""
    model = _model_path(models_dir, name)
    unit = ("The quick brown fox, 1234567, jumps over the lazy dog!\n\n"
            "    def f(x): return x ** 2  # code\t\t\n"
            "你好，世界 🦙🚀 café naïve   \n")
    text = (unit * (1_000_000 // len(unit.encode()) + 1)).encode()
    t0 = time.monotonic()
    out = subprocess.run([str(_tool(build_dir)), str(model), "--add-special", "0",
                          "--parse-special", "0"], input=text, capture_output=True, check=True)
    dt = time.monotonic() - t0
    res = json.loads(out.stdout)
    assert len(res["ids"]) > 100_000
    assert bytes.fromhex(res["roundtrip_hex"]) == text
    assert dt < 30, f"{dt:.1f} s for {len(text)} bytes"
