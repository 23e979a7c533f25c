"""mnemo's scalar reference quantize / dequantize (src/quant/) against independent references.

Our side runs through tests/tools/quant_tool on raw files. References, strongest first:
  - ggml itself (libggml-base from the llama.cpp peer chroot, scripts/peer), when available:
    every type, both directions, bit-exact;
  - gguf-py's gguf.quants (PyPI `gguf`): dequantize of every type it has, and quantize of F16,
    BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, bit-exact;
  - numpy transcriptions of ggml's reference code in this file for what gguf-py lacks
    (Q8_K both ways, IQ4_NL quantize), bit-exact, plus round-trip error bounds.
Bit-exact means equal float32 / byte patterns; two NaNs count as equal (payload propagation
through arithmetic is not part of the contract).
"""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

REPO_ROOT = Path(__file__).resolve().parents[2]

DEQUANT_TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K",
                 "q4_K", "q5_K", "q6_K", "q8_K", "iq4_nl"]
QUANT_TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_K", "iq4_nl"]
GGUF_PY_QUANT = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}
SEEDS = [0, 1, 2, 3]
N = 256 * 32  # elements per case; a multiple of every block size here

IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                        dtype=np.int8)


def gtype(name: str) -> T:
    return T[name.upper()]


def sizes(name: str) -> tuple[int, int]:
    if name == "q8_1":
        return 32, 36  # ggml's size; gguf-py's 40 is stale
    return GGML_QUANT_SIZES[gtype(name)]


@pytest.fixture(scope="session")
def quant_tool(build_dir: Path) -> Path:
    tool = build_dir / "tests" / "tools" / "quant_tool"
    if not tool.is_file():
        pytest.fail(f"{tool} not built: cmake --build {build_dir} --target quant_tool")
    return tool


class Tool:
    """Runs quant_tool (ours, or ggml's functions through the peer chroot) on numpy arrays."""

    def __init__(self, exe: Path, workdir: Path, ggml_lib: str | None = None):
        self.exe, self.workdir, self.ggml_lib = exe, workdir, ggml_lib

    def _run(self, cmd: str, name: str, data: np.ndarray, n: int) -> bytes:
        src, dst = self.workdir / "in.bin", self.workdir / "out.bin"
        src.write_bytes(np.ascontiguousarray(data).tobytes())
        if dst.exists():
            dst.unlink()
        if self.ggml_lib is None:
            argv = [str(self.exe), cmd, name, str(src), str(dst), str(n)]
        else:
            argv = [str(REPO_ROOT / "scripts" / "peer"), str(self.exe), "ggml-" + cmd,
                    self.ggml_lib, name, str(src), str(dst), str(n)]
        r = subprocess.run(argv, capture_output=True, text=True,
                           env=dict(os.environ, PEER_QUIET="1"))
        assert r.returncode == 0, f"{argv}: {r.stderr}"
        return dst.read_bytes()

    def quantize(self, name: str, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float32)
        return np.frombuffer(self._run("quantize", name, x, x.size), dtype=np.uint8)

    def dequantize(self, name: str, raw: np.ndarray) -> np.ndarray:
        bs, ts = sizes(name)
        n = raw.size // ts * bs
        return np.frombuffer(self._run("dequantize", name, raw.astype(np.uint8), n),
                             dtype=np.float32)


@pytest.fixture
def ours(quant_tool: Path, tmp_path: Path) -> Tool:
    return Tool(quant_tool, tmp_path)


def assert_same_floats(a: np.ndarray, b: np.ndarray, what: str):
    a = np.asarray(a, dtype=np.float32).ravel()
    b = np.asarray(b, dtype=np.float32).ravel()
    assert a.shape == b.shape, what
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        pytest.fail(f"{what}: {int((~same).sum())} of {a.size} differ; first at {i}: "
                    f"{a[i]!r} (0x{a.view(np.uint32)[i]:08x}) vs {b[i]!r} "
                    f"(0x{b.view(np.uint32)[i]:08x})")


def assert_same_bytes(a: np.ndarray, b: np.ndarray, what: str, type_size: int):
    a, b = np.asarray(a, np.uint8).ravel(), np.asarray(b, np.uint8).ravel()
    assert a.size == b.size, f"{what}: {a.size} vs {b.size} bytes"
    diff = np.flatnonzero(a != b)
    if diff.size:
        i = int(diff[0])
        pytest.fail(f"{what}: {diff.size} bytes differ; first in block {i // type_size} "
                    f"(byte {i % type_size}): {a[i]} vs {b[i]}")


# ---- inputs ----------------------------------------------------------------------------------

DATA_KINDS = ["normal", "zeros", "large", "huge", "negative", "mixed_scale", "ties", "tiny",
              "outliers"]


def make_data(kind: str, seed: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "zeros":
        x = np.zeros(n)
        x[n // 2:] = rng.standard_normal(n - n // 2) * (seed % 2)  # half the cases: a mixed row
    elif kind == "large":
        x = rng.uniform(-7e4, 7e4, n)  # past fp16's 65504 in places
    elif kind == "huge":
        x = rng.standard_normal(n) * 1e30
    elif kind == "negative":
        x = -np.abs(rng.standard_normal(n)) - 0.25
    elif kind == "mixed_scale":
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 6, n)
    elif kind == "ties":
        # Blocks whose scale is a power of two, so x / d lands exactly on .5 often.
        x = rng.integers(-254, 255, n) / 2.0
        x[::32] = 127.0
        x[16::256] = -128.0
    elif kind == "tiny":
        x = rng.standard_normal(n) * 1e-20  # scales underflow fp16
    elif kind == "outliers":
        x = rng.standard_normal(n) * 0.01
        x[rng.integers(0, n, n // 50)] = rng.choice([-60.0, 45.0], n // 50)
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def random_blocks(name: str, seed: int, sane_scales: bool) -> np.ndarray:
    """Random block bytes; with sane_scales the fp16 / f32 scale fields hold finite values."""
    bs, ts = sizes(name)
    nb = N // bs
    rng = np.random.default_rng(1000 + seed)
    raw = rng.integers(0, 256, (nb, ts), dtype=np.uint8)
    if not sane_scales:
        return raw.ravel()
    if name == "f16":
        return rng.standard_normal(N).astype(np.float16).view(np.uint8)
    if name == "bf16":
        v = rng.standard_normal(N).astype(np.float32).view(np.uint32) >> 16
        return v.astype(np.uint16).view(np.uint8)
    if name == "f32":
        return rng.standard_normal(N).astype(np.float32).view(np.uint8)
    half = lambda: rng.uniform(-2, 2, (nb, 1)).astype(np.float16).view(np.uint8)  # noqa: E731
    fields = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0],
              "iq4_nl": [0], "q2_K": [80, 82], "q3_K": [108], "q4_K": [0, 2], "q5_K": [0, 2],
              "q6_K": [208]}
    if name == "q8_K":
        raw[:, 0:4] = rng.uniform(-1, 1, (nb, 1)).astype(np.float32).view(np.uint8)
    else:
        for off in fields[name]:
            raw[:, off:off + 2] = half()
    return raw.ravel()


# ---- numpy transcriptions of ggml's reference code (for what gguf-py lacks) ------------------

def np_quantize_q8_k(x: np.ndarray) -> np.ndarray:
    """ggml quantize_row_q8_K_ref: iscale = -127/max, q = min(127, rint(iscale x)), d = 1/iscale."""
    blocks = x.reshape(-1, 256).astype(np.float32)
    nb = blocks.shape[0]
    idx = np.abs(blocks).argmax(axis=1)
    mx = blocks[np.arange(nb), idx][:, None]
    zero = (mx == 0)
    with np.errstate(all="ignore"):
        iscale = np.float32(-127.0) / mx
        q = np.rint(iscale * blocks)
        d = np.float32(1.0) / iscale
    q = np.where(zero, 0, np.minimum(q, 127)).astype(np.int8)
    d = np.where(zero, np.float32(0), d).astype(np.float32)
    bsums = q.reshape(nb, 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16)
    return np.concatenate([d.view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)], axis=1)


def np_dequantize_q8_k(raw: np.ndarray) -> np.ndarray:
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view(np.float32)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    with np.errstate(all="ignore"):
        return (d * q).ravel()


def np_best_index_iq4nl(v: np.ndarray) -> np.ndarray:
    """Nearest IQ4_NL level index; exactly halfway picks the upper level (2v >= a + b)."""
    v2 = v + v
    idx = np.zeros(v.shape, dtype=np.int64)
    vals = IQ4NL_VALUES.astype(np.int32)
    for step in (8, 4, 2, 1):
        j = idx + step
        mid2 = (vals[j - 1] + vals[j]).astype(np.float32)
        idx = np.where(v2 >= mid2, j, idx)
    return idx


def np_quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """ggml quantize_row_iq4_nl_ref (quantize_row_iq4_nl_impl, no imatrix, ntry = -1)."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    nb = blocks.shape[0]
    idx = np.abs(blocks).argmax(axis=1)
    mx = blocks[np.arange(nb), idx]
    amax = np.abs(mx)
    active = amax >= np.float32(1e-15)
    with np.errstate(all="ignore"):
        inv = np.float32(1.0) / (mx / np.float32(-127.0))
        L = np.zeros((nb, 32), dtype=np.int64)
        sumqx = np.zeros(nb, dtype=np.float32)
        sumq2 = np.zeros(nb, dtype=np.float32)
        for j in range(32):  # sequential sums, as the C loop
            xj = blocks[:, j]
            l = np_best_index_iq4nl(inv * xj)
            L[:, j] = l
            q = IQ4NL_VALUES[l].astype(np.float32)
            w = xj * xj
            sumqx = sumqx + w * q * xj
            sumq2 = sumq2 + w * q * q
        d = np.where(sumq2 > 0, sumqx / sumq2, np.float32(0)).astype(np.float32)
    d = np.where(active, d, np.float32(0)).astype(np.float32)
    L = np.where(active[:, None], L, 0)
    qs = (L[:, :16] | (L[:, 16:] << 4)).astype(np.uint8)
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(nb, 2), qs], axis=1)


def reference_dequantize(name: str, raw: np.ndarray) -> np.ndarray:
    if name == "q8_K":
        return np_dequantize_q8_k(raw)
    bs, ts = sizes(name)
    data = raw.reshape(-1, ts) if bs > 1 else raw
    with np.errstate(all="ignore"):
        return quants.dequantize(data, gtype(name)).astype(np.float32).ravel()


def reference_quantize(name: str, x: np.ndarray) -> np.ndarray:
    if name == "q8_K":
        return np_quantize_q8_k(x).ravel()
    if name == "iq4_nl":
        return np_quantize_iq4_nl(x).ravel()
    with np.errstate(all="ignore"):
        return quants.quantize(x.reshape(-1, 256), gtype(name)).view(np.uint8).ravel()


# ---- type table --------------------------------------------------------------------------------

def test_traits_match_gguf_py(quant_tool: Path):
    out = subprocess.run([str(quant_tool), "traits"], capture_output=True, text=True, check=True)
    ours = {}
    for line in out.stdout.splitlines():
        tid, name, bs, ts, dq, q = line.split()
        ours[int(tid)] = (name, int(bs), int(ts), dq == "1", q == "1")
    for t in T:
        assert t.value in ours, f"{t.name} ({t.value}) missing"
        name, bs, ts, dq, q = ours[t.value]
        assert name.lower() == t.name.lower()
        expected = (32, 36) if t == T.Q8_1 else GGML_QUANT_SIZES[t]
        assert (bs, ts) == expected, t.name
        assert dq == (name in DEQUANT_TYPES), name
        assert q == (name in QUANT_TYPES), name
    assert set(ours) == {t.value for t in T}


def test_tool_rejects_bad_input(quant_tool: Path, tmp_path: Path):
    src = tmp_path / "x.bin"
    src.write_bytes(b"\0" * 4 * 64)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    for args, msg in [(["quantize", "q4_9", src, tmp_path / "o", "64"], "unknown type"),
                      (["quantize", "q4_0", src, tmp_path / "o", "48"], "block size"),
                      (["quantize", "q4_0", src, tmp_path / "o", "32"], "expected"),
                      (["quantize", "q2_K", empty, tmp_path / "o", "0"], "not supported"),
                      (["dequantize", "iq2_xxs", empty, tmp_path / "o", "0"], "not supported")]:
        r = subprocess.run([str(quant_tool)] + [str(a) for a in args], capture_output=True,
                           text=True)
        assert r.returncode == 1, args
        assert msg in r.stderr, (args, r.stderr)


# ---- dequantize --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("sane", [True, False], ids=["finite_scales", "random_bytes"])
@pytest.mark.parametrize("name", DEQUANT_TYPES)
def test_dequantize_random_blocks_bit_exact(ours: Tool, name: str, sane: bool, seed: int):
    raw = random_blocks(name, seed, sane)
    expected = reference_dequantize(name, raw)
    got = ours.dequantize(name, raw)
    if name == "f16":
        # A signaling-NaN half widens to a quiet NaN in ggml (and here); numpy keeps it
        # signaling. Both are NaN, which assert_same_floats accepts; check our quiet bit too.
        h = raw.view(np.uint16)
        snan = ((h & 0x7c00) == 0x7c00) & ((h & 0x03ff) != 0) & ((h & 0x0200) == 0)
        assert (got.view(np.uint32)[snan] & 0x00400000).all()
    assert_same_floats(got, expected, f"dequantize {name}")


@pytest.mark.parametrize("kind", ["normal", "negative", "outliers", "large"])
@pytest.mark.parametrize("name", [t for t in DEQUANT_TYPES if t in QUANT_TYPES])
def test_dequantize_of_quantized_data_bit_exact(ours: Tool, name: str, kind: str):
    raw = ours.quantize(name, make_data(kind, 7))
    assert_same_floats(ours.dequantize(name, raw), reference_dequantize(name, raw),
                       f"dequantize {name} ({kind})")


# ---- quantize ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", DATA_KINDS)
@pytest.mark.parametrize("name", QUANT_TYPES)
def test_quantize_bit_exact(ours: Tool, name: str, kind: str, seed: int):
    # gguf-py takes a block's scale from its first element of largest magnitude, ggml (and we)
    # from a running max that starts at +0.0: in an all-zero block holding -0.0, gguf-py's scale
    # is +0.0 and ggml's -0.0. Compare on +0.0 only here; test_quantize_matches_ggml keeps -0.0.
    x = make_data(kind, seed) + np.float32(0.0)
    _, ts = sizes(name)
    assert_same_bytes(ours.quantize(name, x), reference_quantize(name, x),
                      f"quantize {name} ({kind}, seed {seed})", ts)


# Worst |error| / block absmax allowed after a round trip (finite, non-tiny data). These are the
# stated tolerances of the formats under ggml's reference rounding: half a step, a full step
# where the reference clamps the extreme level (Q4_0, Q5_0), fp16 storage of scales, 1% slack;
# IQ4_NL has no closed form (measured worst 0.14, see src/quant/quant_test.cc).
ROUND_TRIP_BOUND = {"q4_0": 1 / 8 * 1.02, "q5_0": 1 / 16 * 1.02, "q8_0": 0.5 / 127 * 1.15,
                    "q4_1": 2 / 15 * 0.5 * 1.02 + 2 ** -9, "q5_1": 2 / 31 * 0.5 * 1.02 + 2 ** -9,
                    "q8_K": 0.5 / 127 * 1.01, "iq4_nl": 0.2, "f16": 2 ** -11, "bf16": 2 ** -8,
                    "f32": 0.0}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["normal", "negative", "mixed_scale", "outliers", "ties"])
@pytest.mark.parametrize("name", QUANT_TYPES)
def test_round_trip_error_bound(ours: Tool, name: str, kind: str, seed: int):
    x = make_data(kind, seed)
    y = ours.dequantize(name, ours.quantize(name, x))
    if name in ("f32", "f16", "bf16"):
        # Per element: half an ulp (relative 2^-11 / 2^-8), fp16 subnormals an absolute 2^-25;
        # values past fp16's range become inf by design and are left out.
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        keep = np.abs(xd) <= 65504 if name == "f16" else np.ones(xd.shape, bool)
        tol = np.abs(xd) * ROUND_TRIP_BOUND[name] + (2.0 ** -25 if name == "f16" else 0.0)
        bad = keep & (np.abs(yd - xd) > tol)
        assert not bad.any(), f"{name} {kind}: x={x[bad][:3]} y={y[bad][:3]}"
        return
    bs = sizes(name)[0]
    xb, yb = x.reshape(-1, bs).astype(np.float64), y.reshape(-1, bs).astype(np.float64)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    assert np.all(yb[amax[:, 0] == 0] == 0)
    # The bounds hold where the fp16 scale / min fields can represent the block: absmax within
    # [1e-3, 6e4] (Q8_K's float32 scale has no such limit).
    ok = (amax[:, 0] > 0) if name == "q8_K" else (amax[:, 0] >= 1e-3) & (amax[:, 0] <= 6e4)
    ratio = (np.abs(yb - xb) / np.where(amax > 0, amax, 1))[ok]
    assert ratio.max(initial=0.0) <= ROUND_TRIP_BOUND[name], \
        f"{name} {kind}: worst error {ratio.max():.4g} x absmax"


# ---- ggml itself -------------------------------------------------------------------------------

GGML_LIB = "/usr/lib/x86_64-linux-gnu/libggml-base.so.0"


@pytest.fixture(scope="module")
def ggml_tool(quant_tool: Path):
    """quant_tool calling ggml's own functions inside the llama.cpp peer chroot."""
    chroot = REPO_ROOT / "build-peer" / "sid"
    if os.geteuid() != 0 or not (chroot / GGML_LIB.lstrip("/")).exists():
        pytest.skip("no llama.cpp peer chroot with libggml-base (scripts/peer-setup) or not root")
    exe = quant_tool.resolve()
    if not exe.is_relative_to(REPO_ROOT):
        pytest.skip("quant_tool lies outside the checkout; the chroot cannot see it")
    # The chroot sees the checkout at the same path, so the files go inside it (build-peer/ is
    # ignored by git).
    work = REPO_ROOT / "build-peer" / f"quant-test-{os.getpid()}"
    work.mkdir(exist_ok=True)
    yield Tool(exe, work, GGML_LIB)
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("name", [t for t in QUANT_TYPES if t != "f32"])
def test_quantize_matches_ggml(ours: Tool, ggml_tool: Tool, name: str):
    x = np.concatenate([make_data(k, s) for k in DATA_KINDS for s in (0, 1)])
    _, ts = sizes(name)
    got, want = ours.quantize(name, x), ggml_tool.quantize(name, x)
    if name == "iq4_nl":
        # A block with absmax < 1e-15 gets d = 0; its indices are then meaningless. We write 0;
        # libggml releases before the memset in quantize_row_iq4_nl_impl leave stale ones.
        got, want = got.reshape(-1, ts).copy(), want.reshape(-1, ts).copy()
        zero = (got[:, 0] == 0) & ((got[:, 1] & 0x7f) == 0)
        assert np.all(got[zero, 2:] == 0)
        want[zero, 2:] = 0
    assert_same_bytes(got, want, f"ggml {name}", ts)


@pytest.mark.parametrize("name", [t for t in DEQUANT_TYPES if t != "f32"])
def test_dequantize_matches_ggml(ours: Tool, ggml_tool: Tool, name: str):
    raw = np.concatenate([random_blocks(name, s, sane) for s in SEEDS for sane in (True, False)])
    if name == "f16":
        raw = np.concatenate([raw, np.arange(65536, dtype=np.uint16).view(np.uint8)])
    assert_same_floats(ours.dequantize(name, raw), ggml_tool.dequantize(name, raw),
                       f"ggml {name}")
